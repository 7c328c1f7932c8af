"""Moving a request's KV cache from a prefill replica to a decode replica: latency + bytes / bw.

Bytes are the decode pool's cache layout (its KV format, and a copy per TP rank when the model
has fewer KV heads than ranks), since the receiving ranks store exactly that. Each GPU has its
own NIC (or NVLink port) and sends its shard, so a replica pair moves data over as many links
as the smaller replica has GPUs. With layer-wise streaming (as NIXL/Mooncake connectors do)
layer k's KV leaves as soon as layer k is prefilled, so only what the prefill cannot hide
stays exposed: at least the last layer's share. A hybrid model's Gated DeltaNet layers send
their fixed-size recurrent state per request beside the attention layers' KV (as SGLang's P/D
transfer sends the mamba state slot with the KV pages).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.layout import ParallelLayout
from simulator.hardware.profile import Hardware


@dataclass(frozen=True, slots=True)
class KVLinkCost:
    """One prefill-to-decode link: fixed latency, bandwidth and the payload per token."""

    latency_s: float
    bytes_per_s: float
    kv_bytes_per_token: float  # one request token's KV over all layers, as the decode pool holds it
    num_layers: int
    layerwise: bool
    state_bytes_per_request: float = 0.0  # a hybrid's recurrent states, all decode GPUs

    def _wire_s(self, tokens: int) -> float:
        payload = tokens * self.kv_bytes_per_token + self.state_bytes_per_request
        return payload / self.bytes_per_s

    def transfer_s(self, tokens: int) -> float:
        """Time to move `tokens` tokens of KV when nothing overlaps it."""
        return self.latency_s + self._wire_s(tokens)

    def exposed_s(self, tokens: int, prefill_s: float) -> float:
        """Transfer time left after the prefill that produced the KV ended.

        Layer-wise, layer k's share (T/L) is ready at k·P/L for a prefill of P seconds; sent in
        order over one link the last share lands at max(P + T/L, T + P/L) after the prefill
        began, so max(T/L, T - P(L-1)/L) remains after it (uniform layers).
        """
        wire_s = self._wire_s(tokens)
        if not self.layerwise:
            return self.latency_s + wire_s
        layers = self.num_layers
        hidden_s = max(0.0, prefill_s) * (layers - 1) / layers
        return self.latency_s + max(wire_s / layers, wire_s - hidden_s)


def kv_link_cost(
    hw: Hardware,
    link: str,
    prefill: ParallelLayout,
    decode: ParallelLayout,
    kv_bytes_per_token_per_gpu: float,
    num_layers: int,
    *,
    gb_per_s: float | None = None,
    latency_s: float | None = None,
    layerwise: bool = False,
    state_bytes_per_request_per_gpu: float = 0.0,
) -> KVLinkCost:
    """The link between one prefill and one decode replica. `kv_bytes_per_token_per_gpu` is the
    decode pool's (memory model); its tp × pp ranks each receive their shard."""
    receivers = decode.tensor_parallel * decode.pipeline_parallel
    lanes = min(prefill.tensor_parallel * prefill.pipeline_parallel, receivers)
    if link == "nvlink":
        default_bw = hw.scale_up_bytes_per_s * lanes
        default_latency_s = hw.allreduce_latency_s
    else:
        default_bw = hw.scale_out_bytes_per_s * hw.scale_out_fraction * lanes
        default_latency_s = hw.scale_out_latency_s
    return KVLinkCost(
        latency_s=default_latency_s if latency_s is None else latency_s,
        bytes_per_s=default_bw if gb_per_s is None else gb_per_s * 1e9,
        kv_bytes_per_token=kv_bytes_per_token_per_gpu * receivers,
        num_layers=num_layers,
        layerwise=layerwise,
        state_bytes_per_request=state_bytes_per_request_per_gpu * receivers,
    )
