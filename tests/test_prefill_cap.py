"""SGLang's prefill input cap (--max-prefill-tokens, default 16384): a prefill step admits
whole prompts until the next one does not fit the tokens left under the cap; the first request
of a step always enters, cut only by the step's token budget (PrefillAdder.add_one_req)."""

from __future__ import annotations

import pytest

from simulator.engines.style import load_engine_styles
from simulator.inputs.scenario import load_scenario_file
from simulator.serving.engine_build import build_engine
from simulator.serving.request import Request
from simulator.serving.sched_types import SchedulerConfig
from simulator.serving.scheduler import Scheduler
from tests.test_serving import make


def _sched(cap: int | None, budget: int = 32768) -> Scheduler:
    cfg = SchedulerConfig(
        max_num_seqs=64, max_num_batched_tokens=budget, chunked_prefill=True, policy="fcfs",
        block_size=16, num_blocks=100_000, mix_prefill_decode=False, max_prefill_tokens=cap,
    )
    return Scheduler(cfg)


def _burst(s: Scheduler, lengths: list[int]) -> None:
    for i, n in enumerate(lengths):
        s.add(Request(i, 0.0, n, 8, 0))


def _chunks(s: Scheduler) -> list[tuple[int, int]]:
    planned = s.plan(0.0)
    assert planned is not None
    return [(r.index, c) for r, c in planned.chunks]


def test_cap_stops_at_the_first_prompt_that_does_not_fit() -> None:
    # Prompts of 6000, 6000, 6000, 3000 tokens against a 32768-token step budget.
    # Cap 16384: 6000 (10384 left), 6000 (4384 left), then 6000 > 4384 stops the step at
    # 12000 tokens; the 3000-token prompt behind it waits too (FCFS, no skipping).
    s = _sched(16384)
    _burst(s, [6000, 6000, 6000, 3000])
    assert _chunks(s) == [(0, 6000), (1, 6000)]
    # No cap: the budget takes all four, 21000 tokens.
    s = _sched(None)
    _burst(s, [6000, 6000, 6000, 3000])
    assert _chunks(s) == [(0, 6000), (1, 6000), (2, 6000), (3, 3000)]


def test_first_prompt_enters_above_the_cap_cut_by_the_budget() -> None:
    # A 20000-token prompt alone: above the 16384 cap but first, so it enters, chunked only
    # by the 32768 budget (whole); the next prompt (100 tokens) no longer fits: 16384 - 20000
    # leaves nothing.
    s = _sched(16384)
    _burst(s, [20000, 100])
    assert _chunks(s) == [(0, 20000)]
    # With a 16384 budget the first prompt is chunked at 16384, the next waits.
    s = _sched(16384, budget=16384)
    _burst(s, [20000, 100])
    assert _chunks(s) == [(0, 16384)]


def test_a_continuing_chunk_counts_against_the_cap() -> None:
    # Budget 8192, cap 8192: step 1 takes 8192 tokens of a 10000-token prompt; step 2
    # continues with its last 1808, leaving 8192 - 1808 = 6384 under the cap, so a
    # 7000-token prompt waits where a 6000-token one enters.
    for second, admitted in ((7000, []), (6000, [(1, 6000)])):
        s = _sched(8192, budget=8192)
        _burst(s, [10000, second])
        first = s.plan(0.0)
        assert first is not None
        assert [(r.index, c) for r, c in first.chunks] == [(0, 8192)]
        s.commit(first, 0.1)
        assert _chunks(s) == [(0, 1808), *admitted]


@pytest.mark.parametrize(("engine", "cap"), [("sglang", 16384), ("vllm", None), ("trtllm", None)])
def test_style_default_and_scenario_override(engine: str, cap: int | None) -> None:
    assert load_engine_styles()[engine].max_prefill_tokens == cap
    sc = make(deployment={"engine": engine})
    assert build_engine(load_scenario_file(sc)[0]).scheduler.max_prefill_tokens == cap
    sc = make(deployment={"engine": engine, "scheduler": {"max_prefill_tokens": 4096}})
    assert build_engine(load_scenario_file(sc)[0]).scheduler.max_prefill_tokens == 4096
