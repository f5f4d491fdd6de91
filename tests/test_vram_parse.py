"""Numbers from PyTorch's CUDA OOM messages, all formats, and the fragmentation verdict."""

from __future__ import annotations

import pytest

from vramlab.vram import parse_oom_message, parse_size

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10

# Seeds 000 and 002, verbatim.
SEED_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "23.99 GiB of which 1.10 GiB is free. ... If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")

CURRENT = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 1 has a total capacity of "
           "93.02 GiB of which 1.18 GiB is free. Process 2752205 has 91.82 GiB memory in use. Of the allocated "
           "memory 90.63 GiB is allocated by PyTorch, and 120.54 MiB is reserved by PyTorch but unallocated. If "
           "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
           "to avoid fragmentation.")
TORCH_21 = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 5.96 GiB. GPU 0 has a total capacty of 23.69 GiB "
            "of which 5.25 GiB is free. Process 2006998 has 256.00 MiB memory in use. Including non-PyTorch memory, "
            "this process has 18.17 GiB memory in use. Of the allocated memory 17.88 GiB is allocated by PyTorch, "
            "and 0 bytes is reserved by PyTorch but unallocated.")
OLDER = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
         "14.56 GiB already allocated; 3.06 MiB free; 14.70 GiB reserved in total by PyTorch) If reserved memory "
         "is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
OLDEST = ("RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; "
          "8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)")
OLD_GB = ("RuntimeError: CUDA out of memory. Tried to allocate 1.50 GB (GPU 2; 11.17 GB total capacity; "
          "8.20 GB already allocated; 512.00 KB free; 10.00 GB reserved in total by PyTorch)")


def test_seed_message_every_number():
    r = parse_oom_message(SEED_OOM)
    assert r.tried_bytes == 2 * GiB
    assert r.total_bytes == round(23.99 * GiB) and r.free_bytes == round(1.10 * GiB)
    assert r.device == 0 and r.format == "current"
    assert r.allocated_bytes is None and r.reserved_unallocated_bytes is None and r.verdict is None


def test_current_format():
    r = parse_oom_message(CURRENT)
    assert (r.tried_bytes, r.total_bytes, r.free_bytes) == (round(1.25 * GiB), round(93.02 * GiB), round(1.18 * GiB))
    assert r.allocated_bytes == round(90.63 * GiB) and r.reserved_unallocated_bytes == round(120.54 * MiB)
    assert r.device == 1 and r.verdict == "shortage"


def test_torch_21_typo_and_zero_bytes():
    r = parse_oom_message(TORCH_21)
    assert r.total_bytes == round(23.69 * GiB) and r.reserved_unallocated_bytes == 0
    assert r.allocated_bytes == round(17.88 * GiB) and r.verdict == "shortage"


def test_older_format_reserved_in_total():
    r = parse_oom_message(OLDER)
    assert r.format == "older" and r.tried_bytes == 20 * MiB and r.total_bytes == round(15.78 * GiB)
    assert r.allocated_bytes == round(14.56 * GiB) and r.free_bytes == round(3.06 * MiB)
    assert r.reserved_unallocated_bytes == round(14.70 * GiB) - round(14.56 * GiB)
    assert r.verdict == "fragmentation"      # ~143 MiB cached and unused >= 20 MiB requested


def test_oldest_format_cached():
    r = parse_oom_message(OLDEST)
    assert r.format == "oldest" and r.free_bytes == round(9.28 * GiB)
    # "cached" was printed as held-but-unused memory, so it is the reserved-but-unallocated part
    assert r.allocated_bytes == round(8.57 * MiB) and r.reserved_unallocated_bytes == round(4.68 * MiB)
    assert r.reserved_bytes == round(8.57 * MiB) + round(4.68 * MiB)
    assert r.verdict == "shortage"          # 4.68 MiB unused < 12.50 MiB requested


def test_gb_mb_kb_mean_binary_units():
    r = parse_oom_message(OLD_GB)
    assert r.tried_bytes == round(1.5 * GiB) and r.free_bytes == 512 * KiB and r.device == 2
    assert r.reserved_unallocated_bytes == round(10 * GiB) - round(8.2 * GiB)
    assert r.verdict == "fragmentation"


def test_unrelated_text_gives_none():
    r = parse_oom_message("ValueError: No available memory for the cache blocks.")
    assert all(v is None for v in (r.tried_bytes, r.total_bytes, r.free_bytes, r.allocated_bytes,
                                   r.reserved_unallocated_bytes))
    assert r.format == "unknown" and r.verdict is None


def test_parse_size():
    assert parse_size("1024 bytes") == 1024 and parse_size("1.00 KiB") == 1024 and parse_size("3 GB") == 3 * GiB
    with pytest.raises(ValueError, match="text"):
        parse_size("lots")
    with pytest.raises(ValueError, match="text"):
        parse_oom_message(None)
