"""A scheduler never plans nothing while requests decode: when a prefill-only step (SGLang's
separate prefill batches) loses its prompt to preemption for want of KV blocks, the decoding
requests take the step instead. Before, `plan` returned None there, the replica idled waiting
for an arrival, and a closed loop whose last arrivals had come stalled with requests in flight
(DeepSeek-R1 P/D on B200 under SGLang, 1,024 clients, 7,168 requests)."""

from __future__ import annotations

from simulator.serving.request import Request
from simulator.serving.sched_types import SchedulerConfig
from simulator.serving.scheduler import Scheduler


def test_a_preempted_prefill_step_becomes_a_decode_step() -> None:
    # Blocks of 16 tokens, 6 in all, steps of 32 tokens, prefill apart from decode.
    # A (16-token prompt, 60 outputs) prefills in one chunk and decodes. B (80-token prompt)
    # (five blocks) enters and holds blocks for its first chunks; its next chunk needs blocks
    # A's growing context (up to five blocks) also needs, so B (the newest) is preempted:
    # that step must decode A. Each fits alone, so both finish.
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=32, chunked_prefill=True,
                          policy="fcfs", block_size=16, num_blocks=6, mix_prefill_decode=False)
    s = Scheduler(cfg)
    s.add(Request(0, 0.0, 16, 60, 0))
    t, steps, preempted_steps = 0.0, 0, 0
    added_b = False
    while s.running or len(s.waiting):
        if steps == 1 and not added_b:
            s.add(Request(1, 0.0, 80, 4, 0))
            added_b = True
        before = s.preemptions
        planned = s.plan(t)
        assert planned is not None, (steps, len(s.running), len(s.waiting), s.free_blocks)
        if s.preemptions > before:
            preempted_steps += 1
        t += 0.01
        s.commit(planned, t)
        steps += 1
        assert steps < 1000
    assert preempted_steps >= 1  # the situation the test is about did happen
