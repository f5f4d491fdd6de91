"""docs/instructor.md: the agendas add up, the answer key matches the checks, the log bank is classified."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import vramlab.checks as checks

DOC = (Path(__file__).resolve().parents[1] / "docs" / "instructor.md").read_text()


def _section(title: str) -> str:
    start = DOC.index(title)
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end > 0 else None]


def _minutes(clock: str) -> int:
    h, m = clock.split(":")
    return 60 * int(h) + int(m)


def _agendas():
    section = _section("## Agenda")
    out = []
    for part in re.split(r"\n### ", section)[1:]:
        name = part.splitlines()[0]
        rows = re.findall(r"^\| (\d+:\d\d) \| ([^|]+?) \| (\d+) \|$", part, re.M)
        total = re.search(r"Total: (\d+) h (\d+) min \((\d+) minutes\)", part)
        out.append((name, [(_minutes(a), b, int(c)) for a, b, c in rows], total))
    return out


def test_there_are_two_agendas_each_with_a_total():
    agendas = _agendas()
    assert [a[0] for a in agendas] == ["Full day (labs 00-07)", "Half day (labs 00-03)"]
    assert all(len(rows) > 5 and total for _, rows, total in agendas)


@pytest.mark.parametrize("index", [0, 1])
def test_agenda_times_add_up(index):
    name, rows, total = _agendas()[index]
    for (start, block, minutes), (next_start, next_block, _) in zip(rows, rows[1:]):
        assert start + minutes == next_start, f"{name}: {block} ({minutes} min from {start}) does not end at {next_block}"
    assert rows[-1][1] == "End" and rows[-1][2] == 0
    h, m, n = map(int, total.groups())
    assert 60 * h + m == n == rows[-1][0] == sum(r[2] for r in rows), f"{name}: the stated total is wrong"


def test_full_day_has_every_lab_once_with_its_time():
    _, rows, total = _agendas()[0]
    labs = {b[:2]: minutes for _, b, minutes in rows if re.match(r"\d\d ", b)}
    assert sorted(labs) == ["00", "01", "02", "03", "04", "05", "06", "07"]
    assert f"{sum(labs.values())} of labs" in DOC


@pytest.mark.parametrize("lab", ["00", "01", "02", "03", "04", "05", "06", "07"])
def test_agenda_uses_the_time_the_notebook_states(lab):
    import json

    nb = next((Path(__file__).resolve().parents[1] / "notebooks").glob(f"{lab}_*.ipynb"))
    text = "".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"][:3])
    stated = int(re.search(r"\*\*Time:\*\* about (\d+) minutes", text).group(1))
    _, rows, _ = _agendas()[0]
    assert {b[:2]: m for _, b, m in rows if re.match(r"\d\d ", b)}[lab] == stated


def _answer_rows():
    section = _section("## Answer key")
    return re.findall(r"^\| [^|]+ \| `(check_\w+)` \| ([\d.]+) \| ([\d.; ]+) \|", section, re.M)


def _word_rows():
    section = _section("## Answer key")
    return re.findall(r"^\| [^|]+ \| `(check_\w+)` \| `(\w+)` \| ((?:`\w+`(?:; )?)+) \|", section, re.M)


def test_answer_key_covers_the_value_exercises():
    assert {name for name, _, _ in _answer_rows()} == {"check_fp16_weight_bytes", "check_kv4_bytes_per_token",
                                                      "check_needed_gib", "check_budget_gib"}
    assert {name for name, _, _ in _word_rows()} == {"check_log_label", "check_cap_oom_reason"}


def test_answer_key_names_every_check_of_labs_05_to_07():
    section = _section("## Answer key")
    from vramlab.checks import lab05, lab06, lab07

    for module in (lab05, lab06, lab07):
        for name in module.__all__:
            lab = module.__name__[-2:]
            assert f"`{name}`" in section or re.search(rf"\*\*{lab}, \d", section), (name, lab)


@pytest.mark.parametrize("row", range(2))
def test_word_answers_are_what_the_checks_accept(row, capsys):
    name, answer, wrongs = _word_rows()[row]
    check = getattr(checks, name)
    assert check(answer), capsys.readouterr().out
    for wrong in re.findall(r"`(\w+)`", wrongs):
        assert not check(wrong), f"{name} accepts the listed wrong answer {wrong}"


def test_listed_function_and_dict_answers_are_what_the_checks_accept(capsys):
    from vramlab.checks import lab06

    section = _section("## Answer key")
    assert "166,471,168 bytes" in section and "19 of Llama-3.1-8B's 32" in section
    from vramlab.checks.lab05 import predicted_layers_answer

    assert predicted_layers_answer() == (19, 32)
    good = {"tried_gib": 2.0, "free_gib": 0.397, "reserved_gib": 11.394}
    assert checks.check_oom_numbers(good) and f'{good}'.replace("'", '"') in section
    for key, wrong in (("free_gib", 406.38), ("free_gib", 0.406), ("reserved_gib", 11.18), ("reserved_gib", 11.51),
                       ("reserved_gib", 0.214)):
        assert not checks.check_oom_numbers(dict(good, **{key: wrong})), (key, wrong)
    symbol = lambda t: (re.search(r"version `([^']+)' not found", t) or [None, None])[1]  # noqa: E731
    assert lab06.check_missing_symbol(symbol)
    assert not lab06.check_missing_symbol(lambda t: "libstdc++.so.6")


@pytest.mark.parametrize("row", range(4))
def test_answer_key_numbers_are_what_the_checks_accept(row, smollm2, capsys):
    name, answer, wrongs = _answer_rows()[row]
    check = getattr(checks, name)
    extra = (smollm2[0],) if name == "check_fp16_weight_bytes" else ()
    assert check(float(answer), *extra), capsys.readouterr().out
    for wrong in wrongs.split(";"):
        assert not check(float(wrong), *extra), f"{name} accepts the listed wrong answer {wrong}"


# Kind names the vLLM lesson renamed; the old name is accepted until that branch is merged.
KIND_ALIASES = {"kv_preemption": "block_manager_exhausted"}


def test_log_bank_is_classified_as_listed():
    from vramlab.serving.triage import KINDS, diagnose

    section = _section("## OOM log bank")
    items = re.findall(r"kind `(\w+)`\n   ```text\n(.*?)\n   ```", section, re.S)
    assert len(items) == 6
    for kind, text in items:
        if kind not in KINDS:
            kind = KIND_ALIASES[kind]
        assert diagnose(text.strip()).kind == kind, (kind, text[:80])


def test_exit_quiz_has_ten_questions_and_ten_answers():
    section = _section("## Exit quiz")
    questions, answers = section.split("<details>")
    assert re.findall(r"^(\d+)\. ", questions, re.M) == [str(i) for i in range(1, 11)]
    assert re.findall(r"^(\d+)\. ", answers, re.M) == [str(i) for i in range(1, 11)]


def test_gpu_statement_is_explicit():
    assert "**Nothing in vramlab has been run on a GPU yet.**" in DOC
