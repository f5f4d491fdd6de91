"""The package layout: one folder per lab topic, no import circle, a config normalised once per entry."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import vramlab

SRC = Path(vramlab.__file__).resolve().parent
TOPICS = {"quarot": ("01", "02"), "serving": ("03", "04"), "mla": ("05",), "dispatch": ("06",), "bnb": ("07",),
          "vram": ("08",)}


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Every ``vramlab`` module -> the ``vramlab`` modules it imports, at top level or inside a function."""
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                # "from vramlab.x import y": y may be a submodule
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("vramlab"):
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of module names, or None. A package's ``__init__`` importing its own
    submodules is not a circle (Python resolves it by design), so edges from a submodule to its own
    package or its ancestors are left out."""
    def edges(m):
        return {t for t in graph[m] if not m.startswith(t + ".")}

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges(m)):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state and (found := visit(t)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    # the graph is real: the triage reads PyTorch's OOM message through the vram topic, one way only
    assert len(graph) > 30 and "vramlab.vram.oom_message" in graph["vramlab.serving.triage"]
    assert "vramlab.serving.triage" not in graph["vramlab.vram.oom_message"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_circle():
    # the circle the old layout had: oom imported vram, and vram imported oom
    assert find_cycle({"vramlab.oom": {"vramlab.vram"}, "vramlab.vram": {"vramlab.oom"}}) == [
        "vramlab.oom", "vramlab.vram", "vramlab.oom"]
    assert find_cycle({"vramlab.a": {"vramlab.b"}, "vramlab.b": set()}) is None


def test_one_folder_per_topic_and_no_prefix_families():
    top = [m.name for m in pkgutil.iter_modules([str(SRC)])]
    for topic, labs in TOPICS.items():
        init = SRC / topic / "__init__.py"
        assert init.is_file(), f"{topic}/ has no __init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert all(f"Lab {lab}" in doc or f"Labs {lab}" in doc or f"and {lab}" in doc for lab in labs), (topic, doc[:80])
    modules = sorted(m.name for m in pkgutil.iter_modules([str(SRC)]) if not m.ispkg)
    prefixes = {}
    for name in modules:
        if "_" in name.strip("_"):
            prefixes.setdefault(name.strip("_").split("_")[0], []).append(name)
    families = {p: names for p, names in prefixes.items() if len(names) > 1}
    assert not families, f"top-level modules sharing a name prefix: {families}"
    assert set(TOPICS) <= set(top)


@pytest.mark.parametrize("package", ["vramlab.quarot", "vramlab.serving", "vramlab.mla", "vramlab.dispatch",
                                     "vramlab.bnb", "vramlab.vram", "vramlab.configs"])
def test_every_topic_imports_without_a_gpu(package):
    importlib.import_module(package)


def _count_normalisations(monkeypatch):
    from vramlab import configs

    calls = []
    real = configs._normalise

    def counting(source):
        calls.append(source)
        return real(source)

    monkeypatch.setattr(configs, "_normalise", counting)
    return calls


def test_vllm_plan_normalises_its_config_once(monkeypatch):
    from vramlab.serving.vllm_memory import plan

    calls = _count_normalisations(monkeypatch)
    p = plan("llama-3.1-8b", "L4", max_model_len=8192)
    assert p.num_blocks > 0 and len(calls) == 1, calls


def test_mla_and_dispatch_entries_normalise_their_config_once(monkeypatch):
    from vramlab.dispatch import module_sizes
    from vramlab.mla import MLAConfig

    calls = _count_normalisations(monkeypatch)
    MLAConfig.from_config("deepseek-v3")
    assert len(calls) == 1, calls
    calls.clear()
    sizes = module_sizes("smollm2-135m")
    assert sizes[""] > 0 and len(calls) == 1, calls


def test_a_normalised_config_comes_back_as_it_is():
    from vramlab.configs import ModelConfig, load_config

    cfg = load_config("qwen3-8b")
    assert isinstance(cfg, ModelConfig) and load_config(cfg) is cfg
    assert cfg.shape is cfg.shape and cfg.shape.kind == "GQA"
    assert load_config(dict(cfg)) is not cfg and load_config(dict(cfg)) == cfg
