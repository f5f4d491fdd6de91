"""The fp8 answer probe of lab 03: its requests and the comparison of two engines' greedy answers."""

from __future__ import annotations

import pytest

from vramlab.serving.probe import PROBE, compare_answers, probe_requests


def test_probe_requests_are_windows_of_the_course_text(smollm2):
    _, tokenizer = smollm2
    reqs = probe_requests(tokenizer)
    assert len(reqs) == PROBE["n"] and all(len(r.prompt_token_ids) == PROBE["prompt_tokens"] for r in reqs)
    assert all(r.max_tokens == PROBE["new_tokens"] for r in reqs)
    assert reqs[0].prompt_token_ids != reqs[1].prompt_token_ids
    with pytest.raises(ValueError, match="new_tokens"):
        probe_requests(tokenizer, new_tokens=0)


def test_compare_answers_finds_the_first_changed_token():
    same = compare_answers([[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[1, 2, 3], [4, 0, 6], [0, 8, 9]])
    assert same.first_change == (None, 1, 0) and same.identical == 1 and same.total == 3
    assert same.summary() == "1 of 3 answers identical; the others change at token 2, 1 (of 3)"
    assert compare_answers([[1]], [[1]]).summary() == "1 of 1 answers identical"
    with pytest.raises(ValueError, match="same probe"):
        compare_answers([[1, 2]], [[1, 2], [3, 4]])
    with pytest.raises(ValueError, match="same probe"):
        compare_answers([[1, 2]], [[1]])
