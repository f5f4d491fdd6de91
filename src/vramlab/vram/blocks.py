"""The block each allocation of a dry run gets from the CUDA caching allocator, and so what it adds to
``torch.cuda.memory_allocated()``.

``memory_allocated()`` is the sum of the *blocks* handed out (``stats.allocated_bytes`` is updated with
``block->size`` in ``DeviceCachingAllocator::malloc``, c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.x), not of
the requested sizes. A request is rounded to 512 bytes (``round_size``); a large-pool request (above 1 MiB,
``kSmallSize``) takes the best-fitting cached free block or a new segment (``get_allocation_size``: 20 MiB for
requests under 10 MiB, else rounded up to 2 MiB), and the block is split only when more than 1 MiB would remain
(``should_split``: ``remaining > kSmallSize`` in the large pool). So an 11 MiB request on a fresh 12 MiB segment,
or a 20.5 MiB request served by a cached 21 MiB block, counts whole: the remainder of up to 1 MiB is allocated
too. Small-pool blocks split whenever 512 bytes remain, so a small request counts its rounded size.

:func:`block_bytes` replays a dry run's events (allocations and frees, 512-rounded, in order) through this rule
(one stream, no ``max_split_size_mb``, no ``expandable_segments``, no ``empty_cache``, no OOM retry) and
returns the bytes each allocation really holds. Linear in the events times the free blocks (bisect).
"""

from __future__ import annotations

import bisect

from vramlab.vram.allocator import K_SMALL_SIZE, allocation_size


class _Block:
    __slots__ = ("segment", "offset", "size", "free", "prev", "next")

    def __init__(self, segment: int, offset: int, size: int):
        self.segment, self.offset, self.size = segment, offset, size
        self.free = True
        self.prev: _Block | None = None
        self.next: _Block | None = None


class LargePool:
    """The large pool of one stream: best fit over cached free blocks, split only above a 1 MiB remainder."""

    def __init__(self) -> None:
        self._free: list[tuple[int, int, int]] = []      # (size, segment, offset), sorted: best fit
        self._at: dict[tuple[int, int], _Block] = {}      # (segment, offset) -> free block
        self.segments = 0
        self.reserved = 0

    def _add_free(self, b: _Block) -> None:
        b.free = True
        bisect.insort(self._free, (b.size, b.segment, b.offset))
        self._at[(b.segment, b.offset)] = b

    def _take_free(self, b: _Block) -> None:
        i = bisect.bisect_left(self._free, (b.size, b.segment, b.offset))
        del self._free[i]
        del self._at[(b.segment, b.offset)]
        b.free = False

    def malloc(self, size: int) -> _Block:
        """A block for a 512-rounded request above 1 MiB."""
        i = bisect.bisect_left(self._free, (size, -1, -1))
        if i < len(self._free):
            _, seg, off = self._free[i]
            block = self._at[(seg, off)]
            self._take_free(block)
        else:
            total = allocation_size(size)
            block = _Block(self.segments, 0, total)
            block.free = False
            self.segments += 1
            self.reserved += total
        remaining = block.size - size
        if remaining > K_SMALL_SIZE:                       # should_split, large pool
            rest = _Block(block.segment, block.offset + size, remaining)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._add_free(rest)
        return block

    def release(self, block: _Block) -> None:
        """Free a block and merge it with free neighbours of its segment."""
        for nb in (block.prev, block.next):
            if nb is not None and nb.free:
                self._take_free(nb)
                if nb is block.prev:
                    nb.size += block.size
                    nb.next = block.next
                    if block.next is not None:
                        block.next.prev = nb
                    block = nb
                else:
                    block.size += nb.size
                    block.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = block
        self._add_free(block)


def block_bytes(events: list[dict]) -> list[int]:
    """For each event (``bytes`` > 0 an allocation, < 0 the free of the allocation with the same ``storage``),
    the signed bytes it adds to ``memory_allocated()``: the whole block for a large-pool request."""
    pool = LargePool()
    held: dict[int, tuple[_Block | None, int]] = {}
    out: list[int] = []
    for e in events:
        n, key = e["bytes"], e["storage"]
        if n > 0:
            if n > K_SMALL_SIZE:
                block = pool.malloc(n)
                held[key] = (block, block.size)
                out.append(block.size)
            else:
                held[key] = (None, n)
                out.append(n)
        elif n < 0:
            block, size = held.pop(key, (None, -n))
            if block is not None:
                pool.release(block)
            out.append(-size)
        else:
            out.append(0)
    return out


__all__ = ["LargePool", "block_bytes"]
