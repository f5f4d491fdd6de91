"""checks.tampering: a capstone's check judges only with vramlab's own tools (unseen review #22 replaced
MixedBits.score_plan on the class and raised mixed_bits.BUDGET_BYTES)."""

import functools
import importlib
import sys

import pytest

from vramlab.checks.tampering import replaced_names

_SOURCE = '''
import functools

LIMIT = 66 * 2**20
WIDTHS = (4, 8)
NAME = "x"
cache = {}
_registered = False


def plain(x):
    return x + 1


@functools.lru_cache(maxsize=1)
def cached():
    return 2


class Scorer:
    SCALE = 2

    def score(self, plan):
        return 3.0

    @staticmethod
    def bits(b):
        return b

    @property
    def size(self):
        return 1
'''


@pytest.fixture()
def module(tmp_path, monkeypatch):
    (tmp_path / "tamper_probe.py").write_text(_SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("tamper_probe", None)
    mod = importlib.import_module("tamper_probe")
    yield mod
    sys.modules.pop("tamper_probe", None)


def test_an_untouched_module_and_vramlabs_scoring_modules_are_intact(module):
    from vramlab.checks import lab02

    assert replaced_names(["tamper_probe"]) == []
    for name in lab02._SCORING_MODULES:
        importlib.import_module(name)
    assert replaced_names(lab02._SCORING_MODULES) == []
    assert replaced_names(["vramlab.not_a_module_here"]) == []          # not imported: nothing to judge


@pytest.mark.parametrize("change, named", [
    (lambda m: setattr(m, "plain", lambda x: x), "tamper_probe.plain"),
    (lambda m: setattr(m, "cached", functools.lru_cache(maxsize=1)(lambda: 1)), "tamper_probe.cached"),
    (lambda m: setattr(m.Scorer, "score", lambda self, plan: 1.0), "tamper_probe.Scorer.score"),
    (lambda m: setattr(m.Scorer, "bits", staticmethod(lambda b: 8)), "tamper_probe.Scorer.bits"),
    (lambda m: setattr(m.Scorer, "size", property(lambda self: 0)), "tamper_probe.Scorer.size"),
    (lambda m: setattr(m, "Scorer", object), "tamper_probe.Scorer"),
    (lambda m: setattr(m, "LIMIT", 2**40), "tamper_probe.LIMIT"),
    (lambda m: setattr(m, "LIMIT", float(66 * 2**20)), "tamper_probe.LIMIT"),     # equal, but not the same type
    (lambda m: setattr(m, "WIDTHS", (4, 8, 16)), "tamper_probe.WIDTHS"),
    (lambda m: delattr(m, "NAME"), "tamper_probe.NAME"),
    (lambda m: setattr(m, "plain", print), "tamper_probe.plain"),                # a builtin in its place
])
def test_each_replaced_name_is_named(module, change, named):
    change(module)
    assert replaced_names(["tamper_probe"]) == [named]


def test_state_the_module_changes_itself_is_not_a_replacement(module):
    """Only UPPER_CASE constant expressions are compared: a dict or flag the module sets at run time is its own state."""
    module.cache["k"] = 1
    module._registered = True
    assert replaced_names(["tamper_probe"]) == []


def test_the_source_is_read_from_the_file_not_from_a_copy_taken_at_import(module, tmp_path):
    """A replacement made before vramlab.checks is imported (a restarted kernel that patches first) is caught too:
    the reference is the source file."""
    module.Scorer.score = lambda self, plan: 1.0
    fresh = importlib.import_module("vramlab.checks.tampering")          # already imported: nothing was snapshotted
    assert fresh.replaced_names(["tamper_probe"]) == ["tamper_probe.Scorer.score"]
