"""A small paged-KV block manager and scheduler, after vLLM's V1 engine.

The pool holds ``num_blocks`` blocks of ``block_size`` tokens (16 by default). Each step the
scheduler first extends the running requests (one decode token each, or the rest of a prefill),
growing their block tables a block at a time; when the pool cannot supply a block it preempts the
*newest* running request (vLLM V1 ``Scheduler.schedule``: ``self.running.pop()``), frees its blocks
and puts it back at the front of the queue in RECOMPUTE mode: its KV is dropped and its prompt plus
the tokens it already generated are prefilled again later. Waiting requests are admitted first come,
first served while the pool, ``max_num_seqs`` and the token budget allow, and never in a step that
preempted.

The simulator records the steps where a running request met an empty pool and the preemptions, and
measures throughput in generated tokens per step. Its ``events`` are the simulator's own trace, not
vLLM log lines: vLLM's V1 engine preempts **silently** (no warning; it counts preemptions in the
Prometheus counter ``vllm:num_preemptions``) and always recomputes (no swapping, so ``--swap-space``
does not apply). :meth:`SimResult.v0_warnings` gives what the older V0 scheduler logged instead
(``vllm/core/scheduler.py``: one warning on the 1st, 51st, 101st ... preemption).

Simplification: **no prefix caching**. vLLM V1 enables it by default, so blocks a preempted request
freed may still be cached when it is rescheduled and part of its prompt is not recomputed;
``recomputed_tokens`` here is an upper bound. Everything is deterministic given the workload (and the
workload given its seed).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from vramlab.serving.kvcache import cdiv
from vramlab.serving.vllm_memory import V0_PREEMPTION_FORMAT, V1_PREEMPTION_METRIC


@dataclass
class Request:
    """One sequence: ``prompt_len`` prompt tokens, then ``max_new_tokens`` generated ones."""

    rid: int
    prompt_len: int
    max_new_tokens: int
    arrival: int = 0
    generated: int = 0
    computed: int = 0                      # tokens whose KV is in the cache
    blocks: list[int] = field(default_factory=list)
    preemptions: int = 0
    first_scheduled: int | None = None
    finished: int | None = None

    @property
    def total_tokens(self) -> int:
        """Prompt plus generated tokens so far."""
        return self.prompt_len + self.generated

    def __post_init__(self) -> None:
        for name in ("prompt_len", "max_new_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"`{name}` must be an integer >= 1 token (got {v!r}).")
        if isinstance(self.arrival, bool) or not isinstance(self.arrival, int) or self.arrival < 0:
            raise ValueError(f"`arrival` must be a step number >= 0 (got {self.arrival!r}).")


class BlockPool:
    """``num_blocks`` KV blocks of ``block_size`` tokens; hands out block ids first in, first out."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"`num_blocks` must be an integer >= 1 (got {num_blocks!r}).")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"`block_size` must be an integer >= 1 token (got {block_size!r}).")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def allocate(self, n: int) -> list[int] | None:
        """``n`` block ids, or None (and nothing taken) when fewer than ``n`` are free."""
        if n > len(self._free):
            return None
        return [self._free.popleft() for _ in range(n)]

    def free(self, blocks: list[int]) -> None:
        # vLLM frees a request's blocks in reverse order so its tail is evicted first.
        self._free.extend(reversed(blocks))


@dataclass
class StepRecord:
    step: int
    used_blocks: int
    running: int
    waiting: int
    generated: int
    preempted: list[int]
    scheduled_tokens: int


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
    def first_pool_empty_step(self) -> int | None:
        """The first step where a running request needed a block and the pool had none free."""
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
            "recomputed_tokens": self.recomputed_tokens,  # upper bound: no prefix caching here
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
        fig.add_trace(go.Scatter(x=[x[0], x[-1]] if x else [], y=[self.num_blocks] * (2 if x else 0),
                                 name=f"pool ({self.num_blocks} blocks)", line=dict(color="black", dash="dash")))
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
    """FCFS scheduler over a :class:`BlockPool` with RECOMPUTE preemption of the newest request."""

    def __init__(self, num_blocks: int, block_size: int = 16, max_num_seqs: int = 256,
                 max_num_batched_tokens: int = 2048) -> None:
        self.pool = BlockPool(num_blocks, block_size)
        for name, v in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"`{name}` must be an integer >= 1 (got {v!r}).")
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.step_no = 0
        self.events: list[str] = []
        self.pool_empty_steps: list[int] = []
        self.preemptions = 0
        self.recomputed_tokens = 0

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    def add(self, request: Request) -> None:
        need = cdiv(request.prompt_len + request.max_new_tokens, self.block_size)
        if need > self.pool.num_blocks:
            raise ValueError(f"`request` {request.rid} needs {need} blocks but the pool holds only "
                             f"{self.pool.num_blocks} (prompt + max_new_tokens too long).")
        self.waiting.append(request)

    def _grow(self, req: Request, num_new: int, running: bool = True) -> bool:
        """Give ``req`` blocks for ``num_new`` more tokens; False if the pool is short. A running
        request meeting an empty pool forces a preemption; a waiting request that does not fit waits."""
        need = cdiv(req.computed + num_new, self.block_size) - len(req.blocks)
        if need <= 0:
            return True
        got = self.pool.allocate(need)
        if got is None:
            if running and self.pool.num_free == 0:
                if not self.pool_empty_steps or self.pool_empty_steps[-1] != self.step_no:
                    self.pool_empty_steps.append(self.step_no)
                self.events.append(f"[simulator] step {self.step_no}: request {req.rid} needs {need} block(s) "
                                   f"of {self.block_size} tokens; the pool has none free")
            return False
        req.blocks.extend(got)
        return True

    def _preempt(self, req: Request) -> None:
        self.pool.free(req.blocks)
        self.events.append(f"[simulator] step {self.step_no}: preempted request {req.rid} (recompute): "
                           f"freed {len(req.blocks)} blocks, {req.computed} tokens to recompute")
        self.recomputed_tokens += req.computed
        self.preemptions += 1
        req.preemptions += 1
        req.blocks = []
        req.computed = 0
        self.waiting.appendleft(req)

    def step(self) -> StepRecord:
        """Schedule and run one model step."""
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        preempted: list[int] = []
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new = min(req.total_tokens - req.computed, budget)
            while not self._grow(req, num_new):
                victim = self.running.pop()          # the newest running request
                self._preempt(victim)
                preempted.append(victim.rid)
                if victim is req:
                    break
            else:
                scheduled.append((req, num_new))
                budget -= num_new
                i += 1
                continue
            break  # req itself was preempted: nothing after it is running any more
        if not preempted:
            while (self.waiting and self.waiting[0].arrival <= self.step_no and budget > 0
                   and len(self.running) < self.max_num_seqs):
                req = self.waiting[0]
                num_new = min(req.total_tokens - req.computed, budget)
                if not self._grow(req, num_new, running=False):
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
            if req.computed == req.total_tokens:
                req.generated += 1
                generated += 1
                if req.generated >= req.max_new_tokens:
                    req.finished = self.step_no
                    self.pool.free(req.blocks)
                    req.blocks = []
                    self.running.remove(req)
        rec = StepRecord(self.step_no, self.pool.num_used, len(self.running),
                         sum(r.arrival <= self.step_no for r in self.waiting), generated, preempted,
                         sum(n for _, n in scheduled))
        self.step_no += 1
        return rec

    def run(self, requests: list[Request], max_steps: int = 100_000) -> SimResult:
        """Add ``requests`` and step until all finish (or ``max_steps``)."""
        for r in sorted(requests, key=lambda r: (r.arrival, r.rid)):
            self.add(r)
        steps = []
        while (self.waiting or self.running) and self.step_no < max_steps:
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


def simulate(num_blocks: int, requests: list[Request], block_size: int = 16, max_num_seqs: int = 256,
             max_num_batched_tokens: int = 2048) -> SimResult:
    """Run a fresh :class:`Scheduler` over copies of ``requests``."""
    if not isinstance(requests, (list, tuple)) or not all(isinstance(r, Request) for r in requests):
        raise ValueError("`requests` must be a list of Request objects (e.g. from burst()).")
    fresh = [Request(r.rid, r.prompt_len, r.max_new_tokens, r.arrival) for r in requests]
    return Scheduler(num_blocks, block_size, max_num_seqs, max_num_batched_tokens).run(fresh)


__all__ = ["Request", "BlockPool", "Scheduler", "StepRecord", "SimResult", "burst", "simulate", "V1_PREEMPTION_METRIC"]
