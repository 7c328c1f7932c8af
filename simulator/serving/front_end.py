"""When a served request reaches the engine: after the API front end has parsed and tokenized
it, one request at a time where the engine's front end is a single process.

A client's request first passes the API server (HTTP parse, hand-off, prompt tokenization:
`FrontEnd.service_s` = ingest + per_input_token_s x input tokens). Where the style says the
front end is serial (SGLang's one TokenizerManager process), requests that arrive together
queue for it, so the k-th of a burst reaches the engine after k services. The request latency
(`FrontEnd.latency_s`, the serving stack's hops) follows the service and holds nothing, so no
queue forms for it. Offline runs (an offline benchmark hands the engine tokenized prompts)
keep the front-end cost out of the engine's timeline and only add it to the client-side TTFT,
as before.

Timeline, service time d_i, arrivals t_i, serial front end:
    done_i = max(t_i, done_{i-1}) + d_i;  ready_i = done_i + latency;  front_end_s_i = ready_i - t_i
Parallel front end: ready_i = t_i + d_i + latency.
"""

from __future__ import annotations

from simulator.engines.style import FrontEnd


class FrontEndQueue:
    """The API front end of one deployment: when each request is handed to the engine."""

    def __init__(self, front_end: FrontEnd, serial: bool, served: bool) -> None:
        self.front_end = front_end
        self.serial = serial
        self.served = served  # False: offline, the engine gets every prompt tokenized at once
        self.free_s = 0.0  # when the serial front end finishes its current request

    def ready_s(self, now_s: float, input_tokens: int) -> float:
        """When a request sent at `now_s` reaches the engine."""
        if not self.served:
            return now_s
        begin = max(now_s, self.free_s) if self.serial else now_s
        done = begin + self.front_end.service_s(input_tokens)
        if self.serial:
            self.free_s = done
        return done + self.front_end.latency_s

    def client_side_s(self, now_s: float, ready_s: float, input_tokens: int) -> float:
        """Client-side time before the engine has the request (queue, ingest, tokenization):
        charged after the fact for offline runs, whose engine timeline leaves it out."""
        if self.served:
            return ready_s - now_s
        return self.front_end.service_s(input_tokens) + self.front_end.latency_s
