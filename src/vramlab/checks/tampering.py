"""Whether vramlab's own tools are still what their source files say, before a check judges with them.

A capstone's check that measures live (lab 02 scores a plan on a scorer it keeps to itself) is only as honest as the
functions it calls. Unseen review #22 replaced a public method on the class (``MixedBits.score_plan = lambda self,
plan: 1.0``), which reaches the check's own scorer too, and a public constant (``mixed_bits.BUDGET_BYTES = 2**40``).
:func:`replaced_names` compiles each module's source file again and compares, name by name, what the module and its
classes hold now: a function whose code differs, or anything else in its place, and a constant whose value differs,
is reported. Compiling from the file, not a copy taken at import, catches a change made before ``vramlab.checks`` was
imported (a restarted kernel that patches first).

Simplified: only what the source defines at module level (functions, classes and their methods, and UPPER_CASE
constants written as number, string or tuple expressions) is compared; a change inside PyTorch is caught by the check's
calibration score instead (``checks.lab02``).
"""

from __future__ import annotations

import ast
import functools
import operator
import sys
import types
from pathlib import Path
from typing import Any, Iterable

__all__ = ["replaced_names"]

_MISSING = object()
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}


def _constant(node: ast.AST) -> Any:
    """The value of a number, string or tuple expression (``66 * 2**20``, ``(4, 8)``); raises ValueError otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bytes, bool, type(None))):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(_constant(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_constant(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _constant(node.left), _constant(node.right)
        if isinstance(node.op, ast.Pow) and (not isinstance(right, int) or abs(right) > 64):
            raise ValueError("too large a power")
        return _BINARY[type(node.op)](left, right)
    raise ValueError("not a constant expression")


def _codes(code: types.CodeType) -> dict[str, types.CodeType]:
    """Every function's code object in ``code`` (a compiled module), by qualified name."""
    out = {}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name != "<module>" and not const.co_name.startswith("<"):
                out[const.co_qualname] = const
            out.update(_codes(const))
    return out


@functools.lru_cache(maxsize=None)
def _source_definitions(path: str) -> tuple[dict, dict, dict]:
    """(functions, classes, constants) the file at ``path`` defines at module level: ``{name: code}``,
    ``{class name: {method name: code}}``, ``{NAME: value}`` (UPPER_CASE names only: ``_registered = False``, which
    the module sets itself later, is state, not a constant). Cached per file (the sources do not change in a run)."""
    source = Path(path).read_text(encoding="utf-8")
    codes = _codes(compile(source, path, "exec", dont_inherit=True))
    functions, classes, constants = {}, {}, {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in codes:
            functions[node.name] = codes[node.name]
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = {m.name: codes[f"{node.name}.{m.name}"] for m in node.body
                                  if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                                  and f"{node.name}.{m.name}" in codes}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            try:
                value = _constant(node.value)
            except (ValueError, ZeroDivisionError, OverflowError):
                continue
            for t in targets:     # constants by name (UPPER_CASE); a lower-case name is the module's own state
                if isinstance(t, ast.Name) and t.id == t.id.upper() and any(c.isalpha() for c in t.id):
                    constants[t.id] = value
    return functions, classes, constants


def _function_code(obj: Any) -> types.CodeType | None:
    """The code of a function, through decorators that keep ``__wrapped__`` and through staticmethod, classmethod
    and property; None for anything else."""
    for _ in range(8):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        elif isinstance(obj, property):
            obj = obj.fget
        elif hasattr(obj, "__wrapped__"):
            obj = obj.__wrapped__
        else:
            break
    code = getattr(obj, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def replaced_names(modules: Iterable[str]) -> list[str]:
    """The names in ``modules`` (dotted names of imported vramlab modules, e.g. ``"vramlab.quarot.mixed_bits"``)
    that no longer hold what their source file defines: ``"module.function"``, ``"module.Class.method"`` or
    ``"module.CONSTANT"``. Empty when every one is intact. A module not imported yet is intact by definition."""
    changed = []
    for name in modules:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if module is None or not path or not path.endswith(".py"):
            continue
        short = name.rsplit(".", 1)[-1]
        functions, classes, constants = _source_definitions(path)
        for fname, code in functions.items():
            if _function_code(module.__dict__.get(fname)) != code:
                changed.append(f"{short}.{fname}")
        for cname, methods in classes.items():
            cls = module.__dict__.get(cname)
            if not isinstance(cls, type) or cls.__module__ != name or cls.__qualname__ != cname:
                changed.append(f"{short}.{cname}")
                continue
            for mname, code in methods.items():
                if _function_code(cls.__dict__.get(mname)) != code:
                    changed.append(f"{short}.{cname}.{mname}")
        for cname, value in constants.items():
            live = module.__dict__.get(cname, _MISSING)
            if live is _MISSING or type(live) is not type(value) or live != value:
                changed.append(f"{short}.{cname}")
    return changed

