"""Numbers from PyTorch's CUDA OOM messages, all formats, and the fragmentation verdict."""

from __future__ import annotations

import re
from pathlib import Path

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


# --- every OOM text in the source articles, read from the files when they are at hand -----------------
SEEDS = Path("/work/shared/seeds")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _torch_oom_texts(text: str) -> list[str]:
    """Each 'CUDA out of memory. Tried to allocate <size>' message, up to its end ('fragmentation.')."""
    out = []
    for m in re.finditer(r"(?:torch\.)?(?:OutOfMemoryError|RuntimeError): CUDA out of memory\. Tried to allocate \d"
                         r".*?(?:fragmentation\.|\)|\n)", text, flags=re.DOTALL):
        out.append(m.group(0))
    return out


def _every_number_extracted(msg: str) -> None:
    r = parse_oom_message(msg)
    sizes = {v for v in (r.tried_bytes, r.total_bytes, r.free_bytes, r.allocated_bytes,
                         r.reserved_unallocated_bytes, r.allowed_bytes, r.process_bytes) if v is not None}
    sizes |= set((r.other_processes or {}).values())
    for m in re.finditer(r"(\d+(?:\.\d+)?)\s*(bytes|[KMGT]i?B)\b", msg):
        assert parse_size(m.group(0)) in sizes, f"{m.group(0)!r} not extracted from {msg!r}"
    plain = [int(n) for n in re.findall(r"GPU (\d+)", msg)]
    assert plain == [r.device]
    pids = [int(n) for n in re.findall(r"Process (\d+)", msg)]
    assert pids == sorted((r.other_processes or {}).keys(), key=pids.index)


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the source articles are only on the authors' machines; "
                                                 "SEED_OOM above is their message, verbatim")
def test_every_number_of_every_oom_text_in_the_articles():
    texts = []
    for path in sorted(SEEDS.glob("*.txt")):
        texts += _torch_oom_texts(path.read_text(errors="replace"))
    assert len(texts) >= 2  # the 2.00 GiB message, quoted in two articles
    for msg in texts:
        _every_number_extracted(msg)
        assert parse_oom_message(msg).format == "current"
    # The only other 'OutOfMemoryError' text in the articles is a generated catalogue entry that no vLLM
    # release prints ("Unable to allocate memory for KV cache block ... free blocks: 0"). It is not a
    # PyTorch allocator message: parse_oom_message finds no sizes in it, oom.diagnose reads it instead.
    from vramlab.serving.triage import diagnose

    catalogue = [line for p in SEEDS.glob("*.txt") for line in p.read_text(errors="replace").splitlines()
                 if "Unable to allocate memory for KV cache block" in line]
    for line in catalogue:
        r = parse_oom_message(line)
        assert r.format == "unknown" and r.tried_bytes is None
        assert diagnose(line).kind == "kv_preemption"  # its real counterpart: V0 preemption / V1 recompute


def test_every_number_of_the_verbatim_messages():
    for msg in (SEED_OOM, CURRENT, TORCH_21, CAPPED):
        _every_number_extracted(msg)


# The shape c10/cuda/CUDACachingAllocator.cpp gives the message under set_per_process_memory_fraction
# ("<allowed> allowed; " after the process list); sizes from format_size. Assembled from the source's format
# string with arbitrary round numbers (not a measurement).
CAPPED = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of "
          "10.00 GiB of which 7.00 GiB is free. Including non-PyTorch memory, this process has 2.50 GiB memory in "
          "use. 2.00 GiB allowed; Of the allocated memory 1.50 GiB is allocated by PyTorch, and 0 bytes is reserved "
          "by PyTorch but unallocated.")


def test_allowed_and_process_numbers():
    r = parse_oom_message(CAPPED)
    assert r.allowed_bytes == 2 * GiB and r.process_bytes == round(2.5 * GiB)
    assert r.free_bytes == 7 * GiB and r.other_processes is None
    t = parse_oom_message(TORCH_21)
    assert t.other_processes == {2006998: 256 * MiB} and t.process_bytes == round(18.17 * GiB)
    assert t.allowed_bytes is None


# set_per_process_memory_fraction(1.0): PyTorch still prints "<Y> allowed; " (the clause depends only on a fraction
# being set), and Y is the total capacity. The same real format as CAPPED (round numbers, not a measurement).
FRACTION_ONE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                "15.77 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 14.66 GiB memory "
                "in use. 15.77 GiB allowed; Of the allocated memory 12.20 GiB is allocated by PyTorch, and 2.05 GiB is "
                "reserved by PyTorch but unallocated.")


def test_allowed_equal_to_the_total_is_not_a_cap():
    r = parse_oom_message(FRACTION_ONE)
    assert r.allowed_bytes == r.total_bytes == round(15.77 * GiB) and not r.capped
    assert r.verdict == "fragmentation"          # 2.05 GiB cached unused >= the 2 GiB request
    assert parse_oom_message(FRACTION_ONE.replace("2.05 GiB is reserved", "0.50 GiB is reserved")).verdict == "shortage"
    # a cap just below the total (a fraction of 0.9) is a cap; one the two-decimal rounding could hide is not
    assert parse_oom_message(FRACTION_ONE.replace("15.77 GiB allowed", "14.19 GiB allowed")).verdict == "cap"
    assert not parse_oom_message(FRACTION_ONE.replace("15.77 GiB allowed", "15.76 GiB allowed")).capped
    assert parse_oom_message(CAPPED).capped and not parse_oom_message(TORCH_21).capped


# PyTorch 1.8-1.13's message under set_per_process_memory_fraction: "<F> free; <Y> allowed; <V> reserved in total
# by PyTorch)" (format string of c10/cuda/CUDACachingAllocator.cpp in that series; round numbers, not a
# measurement). A 1 GiB cap prints as "1024.00 MiB": format_size switches to GiB only above 1 GiB.
OLD_CAPPED = ("RuntimeError: CUDA out of memory. Tried to allocate 256.00 MiB (GPU 0; 15.78 GiB total capacity; "
              "768.00 MiB already allocated; 14.21 GiB free; 1024.00 MiB allowed; 768.00 MiB reserved in total by "
              "PyTorch)")


def test_old_format_with_allowed_is_a_cap():
    r = parse_oom_message(OLD_CAPPED)
    assert r.format == "older" and r.allowed_bytes == 1 * GiB and r.verdict == "cap"
    assert r.tried_bytes == 256 * MiB and r.free_bytes == round(14.21 * GiB) and r.reserved_unallocated_bytes == 0
    # the same message without the cap: 14 GiB "free" in the old format is not read as a cap
    uncapped = parse_oom_message(OLD_CAPPED.replace("1024.00 MiB allowed; ", ""))
    assert uncapped.allowed_bytes is None and uncapped.verdict == "shortage"


def test_current_format_one_gib_cap_prints_in_mib():
    msg = CAPPED.replace("2.00 GiB allowed;", "1024.00 MiB allowed;")
    r = parse_oom_message(msg)
    assert r.allowed_bytes == 1 * GiB and r.verdict == "cap"
