"""The simulation's per-request record: one row of a structured array per request, and the
codes of why a request was dropped."""

from __future__ import annotations

import numpy as np

# Codes stored in RECORD_DTYPE["drop_reason"]; DROP_REASONS[code] says why (0: not dropped).
DROP_KV, DROP_CONTEXT, DROP_BUDGET, DROP_SESSION = 1, 2, 3, 4
DROP_REASONS = (
    "",
    "exceeds KV cache capacity",
    "exceeds max context length",
    "prompt exceeds max_num_batched_tokens without chunked prefill",
    "an earlier turn of its session was dropped",
)

RECORD_DTYPE = np.dtype(
    [
        ("arrival_s", "f8"),
        ("scheduled_s", "f8"),
        ("first_token_s", "f8"),
        ("finish_s", "f8"),
        ("input_tokens", "i8"),
        ("output_tokens", "i8"),
        ("preemptions", "i4"),
        ("replica", "i4"),
        ("drop_reason", "i1"),  # index into DROP_REASONS; 0 = not dropped
        # The replica's decode steps that emitted its tokens after the first (the last run of
        # them for a preempted request); -1 when it never decoded. Token times live in the
        # replica's decode-step clock: Result.token_times(i).
        ("decode_first_step", "i8"),
        ("decode_last_step", "i8"),
        # Client-side time before the engine had the request (front-end queue, ingest,
        # tokenization; serving/front_end.py): the client sent it at arrival_s - front_end_s.
        ("front_end_s", "f8"),
        # Prompt tokens found in the prefix cache when it was first admitted (their prefill
        # skipped; serving/prefix_cache.py); 0 without shared content.
        ("cached_tokens", "i8"),
    ]
)
