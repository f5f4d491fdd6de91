"""Lab 05's held-out windows (windows 6-8 of the notebook's 8 x 512), and the record that their perplexity was read.

Exercise 5 asks for a prediction of the learner's plan's perplexity on windows 6-8, stored before the check measures
it. Any run of a latent-rank plan on those tokens (:func:`vramlab.mla.measure_ranks`, or the model called inside
:func:`vramlab.mla.latent_ranks`) before the prediction is stored hands over the number asked for (unseen review
#16). Such a run is therefore noted, lasting and per notebook (:mod:`vramlab.ran`), as the measurement of that
prediction: ``vramlab.checks.check_prediction`` then refuses a prediction stored after it (``counts=False``), as it
refuses one stored after its own measurement. The lab's own cells and the check's runs go inside
``ran._unrecorded()`` and note nothing.

A run is on the held-out windows when one of its rows shares at least :data:`MIN_SHARED_TOKENS` positions with them
(16-token runs of the same ids): a slice, a copy, a shifted or a shortened window counts; window 1 (the capstone's),
windows 1-5 and the calibration windows share none (``tests/test_checks_lab05.py``).
"""

from __future__ import annotations

import functools
from typing import Any

from vramlab import ran

#: Windows 6-8 of ``token_windows(tok, n_windows=8, length=512)``: the capstone's held-out text.
HELDOUT = slice(5, 8)
HELDOUT_LABEL = "windows 6-8"
WINDOW_LENGTH = 512
#: The ``what`` of the capstone's prediction (``check_prediction(predicted, None, HELDOUT_PREDICTION)``).
HELDOUT_PREDICTION = f"perplexity of your plan on {HELDOUT_LABEL}"
#: ``vramlab.checks.lab00``'s kind for "this prediction's measurement ran" (a test keeps the two equal; this module
#: imports nothing from vramlab.checks, which imports it).
MEASURED_KIND = "prediction measured"
NGRAM = 16
MIN_SHARED_TOKENS = 128      # a quarter of a window: fewer shared tokens give another perplexity


@functools.lru_cache(maxsize=1)
def _heldout_ngrams() -> frozenset:
    """Every 16-token run of ids in windows 6-8 (the SmolLM2 tokenizer on the frozen evaluation text)."""
    from transformers import AutoTokenizer

    from vramlab.data import token_windows
    from vramlab.models import ensure_converted

    tok = AutoTokenizer.from_pretrained(str(ensure_converted()))
    held = token_windows(tok, n_windows=HELDOUT.stop, length=WINDOW_LENGTH)[HELDOUT].tolist()
    return frozenset(tuple(row[i:i + NGRAM]) for row in held for i in range(len(row) - NGRAM + 1))


def shares_heldout(input_ids: Any) -> bool:
    """Whether a row of ``input_ids`` (token ids ``[n, length]`` or ``[length]``, a tensor or lists) covers at least
    :data:`MIN_SHARED_TOKENS` positions of windows 6-8. Anything that is not token ids: False."""
    try:
        rows = input_ids.tolist() if hasattr(input_ids, "tolist") else list(input_ids)
        if rows and not isinstance(rows[0], list):
            rows = [rows]
        rows = [[int(t) for t in row] for row in rows]
    except (TypeError, ValueError):
        return False
    if not any(len(row) >= MIN_SHARED_TOKENS for row in rows):
        return False
    grams = _heldout_ngrams()
    for row in rows:
        covered = set()
        for i in range(len(row) - NGRAM + 1):
            if tuple(row[i:i + NGRAM]) in grams:
                covered.update(range(i, i + NGRAM))
        if len(covered) >= MIN_SHARED_TOKENS:
            return True
    return False


def recording() -> bool:
    """False inside ``ran._unrecorded()`` (the lab's own cells, a check's runs): nothing need be looked at."""
    return ran._RECORDING[-1]


def note_if_heldout(input_ids: Any) -> bool:
    """Note the capstone's prediction as measured (lasting, per notebook) when ``input_ids`` are on windows 6-8 and
    this run is the learner's. Returns whether it noted."""
    if not recording() or not shares_heldout(input_ids):
        return False
    ran.note(MEASURED_KIND, HELDOUT_PREDICTION, lasting=True)
    return True


def heldout_was_measured() -> bool:
    """Whether a plan's perplexity on windows 6-8 was measured here by the learner (or the prediction compared)."""
    return HELDOUT_PREDICTION in ran.ran(MEASURED_KIND)


__all__ = ["HELDOUT", "HELDOUT_LABEL", "HELDOUT_PREDICTION", "shares_heldout", "note_if_heldout",
           "heldout_was_measured"]
