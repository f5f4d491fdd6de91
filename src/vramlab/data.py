"""Offline evaluation text: the pydoc topics that ship with every CPython.

``"\\n\\n".join(pydoc_data.topics.topics.values())`` is ~465k characters, ~113k SmolLM2 tokens
(../shared/REFERENCE.md). It is not WikiText, so perplexities are not comparable with papers,
only with each other.
"""

from __future__ import annotations

import functools


def pydoc_text() -> str:
    """The pydoc topics text of this Python (~465k characters on 3.11)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics.values())


@functools.lru_cache(maxsize=4)
def _token_ids(tokenizer) -> tuple[int, ...]:
    return tuple(tokenizer(pydoc_text(), add_special_tokens=False)["input_ids"])


def token_windows(tokenizer, n_windows: int = 8, length: int = 512, offset: int = 0):
    """Consecutive, non-overlapping windows of the pydoc text.

    Returns a ``torch.LongTensor`` of shape ``[n_windows, length]`` (token ids); window ``i``
    starts at token ``offset + i * length``. Raises ValueError when the text is too short.
    """
    import torch

    if n_windows < 1 or length < 2:
        raise ValueError(f"n_windows must be >= 1 and length >= 2 (got n_windows={n_windows}, length={length}).")
    if offset < 0:
        raise ValueError(f"offset must be >= 0 tokens (got {offset}).")
    ids = _token_ids(tokenizer)
    need = offset + n_windows * length
    if need > len(ids):
        raise ValueError(f"The pydoc text has {len(ids)} tokens, fewer than the {need} asked for; "
                         f"use fewer or shorter windows.")
    flat = torch.tensor(ids[offset:need], dtype=torch.long)
    return flat.view(n_windows, length)
