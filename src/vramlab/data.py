"""Offline evaluation text: a frozen copy of Python 3.11.7's pydoc topics, shipped with vramlab.

Every CPython ships the text of its ``pydoc`` help topics (``pydoc_data.topics``), but the text
changes between Python versions, so windows cut from the running Python would give different
perplexities on Colab and in CI. vramlab therefore ships the first 27 topics of CPython 3.11.7
(``vramlab/texts/pydoc_topics_3.11.7.txt.gz``, 151,923 bytes, ~37k SmolLM2 tokens; licence:
``vramlab/texts/NOTICE.txt`` and the PSF licence beside it) and reads it on every Python.

It covers the 8 evaluation windows of 512 tokens (tokens 0-4095), the 16 GPTQ calibration windows
after them (4096-12287) and a margin. The token ids are the ones the full 3.11 topics text gave
(the test suite holds their hash). It is not WikiText, so perplexities are not comparable with
papers, only with each other.
"""

from __future__ import annotations

import functools
import hashlib

TEXT_FILE = "pydoc_topics_3.11.7.txt.gz"
TEXT_SHA256 = "7eaae95bb0e16b261a67cde7216f04eb3ec0f384debc3991412eacbb1d970329"  # uncompressed UTF-8 bytes


@functools.lru_cache(maxsize=1)
def evaluation_text() -> str:
    """The frozen evaluation text (151,528 characters, 151,923 UTF-8 bytes), the same on every Python version.

    Raises RuntimeError with one sentence when the packaged file is missing or damaged.
    """
    import gzip
    from importlib import resources

    resource = resources.files("vramlab") / "texts" / TEXT_FILE
    try:
        raw = gzip.decompress(resource.read_bytes())
    except (OSError, EOFError) as exc:
        raise RuntimeError(f"The evaluation text vramlab/texts/{TEXT_FILE} is missing or damaged ({exc}); "
                           f"reinstall vramlab.") from None
    if hashlib.sha256(raw).hexdigest() != TEXT_SHA256:
        raise RuntimeError(f"The evaluation text vramlab/texts/{TEXT_FILE} does not match its SHA-256; "
                           f"reinstall vramlab.")
    return raw.decode("utf-8")


def pydoc_text() -> str:
    """Alias of :func:`evaluation_text` (the frozen pydoc topics; no longer the running Python's)."""
    return evaluation_text()


@functools.lru_cache(maxsize=4)
def _token_ids(tokenizer) -> tuple[int, ...]:
    ids = tokenizer(evaluation_text(), add_special_tokens=False)["input_ids"]
    # The text ends where the 28th topic began in the full text: its last token could have merged
    # with what followed there, so it is dropped (the remaining ids equal the full text's).
    return tuple(ids[:-1])


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer (got {value!r} of type {type(value).__name__}).")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum} (got {value}).")
    return value


def token_windows(tokenizer, n_windows: int = 8, length: int = 512, offset: int = 0):
    """Consecutive, non-overlapping windows of the frozen evaluation text.

    Returns a ``torch.LongTensor`` of shape ``[n_windows, length]`` (token ids); window ``i``
    starts at token ``offset + i * length``. Raises ValueError when the text is too short.
    """
    import torch

    _check_int("n_windows", n_windows, 1)
    _check_int("length", length, 2)
    _check_int("offset", offset, 0)
    if not callable(tokenizer):
        raise TypeError(f"tokenizer must be a Hugging Face tokenizer, e.g. the second value of "
                        f"vramlab.models.load_smollm2() (got {type(tokenizer).__name__}).")
    ids = _token_ids(tokenizer)
    need = offset + n_windows * length
    if need > len(ids):
        raise ValueError(f"The evaluation text has {len(ids)} tokens, fewer than the {need} asked for "
                         f"(offset {offset} + {n_windows} x {length}); use fewer or shorter windows.")
    flat = torch.tensor(ids[offset:need], dtype=torch.long)
    return flat.view(n_windows, length)
