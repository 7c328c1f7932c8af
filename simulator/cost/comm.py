"""Collective times: latency + bytes / achievable bandwidth, NVLink inside the domain, NIC beyond.

The bus-bandwidth convention is nccl-tests': an all-reduce of S bytes over n ranks moves
2(n-1)/n x S per rank; all-gather and reduce-scatter move (n-1)/n x S; all-to-all sends
(n-1)/n of each rank's buffer away. Latency and bandwidth per GPU are measured fields in the
hardware profile (fitted to the NCCL and custom all-reduce rows in shared/reference).
"""

from __future__ import annotations

from simulator.hardware.profile import Hardware

# The per-peer latency term is fitted on groups of 2 to 8 GPUs (tensor parallelism inside an
# HGX node); beyond 8 it is held at its 8-GPU value, not extrapolated: NCCL's tree and NVLS
# algorithms grow as log n there, and no measurement here says by how much.
PER_PEER_GROUP_MAX = 8


def scale_up_latency_s(group: int, hw: Hardware) -> float:
    """Small-message latency of a collective over `group` GPUs of one NVLink domain: the
    2-GPU figure plus the profile's per-peer term for each GPU beyond two, up to
    PER_PEER_GROUP_MAX (a ring takes 2(n-1) steps, a one-shot kernel reads and flags n-1
    peers)."""
    peers = max(0, min(group, PER_PEER_GROUP_MAX) - 2)
    return hw.allreduce_latency_s + hw.allreduce_latency_per_peer_s * peers


def _link(hw: Hardware, group: int) -> tuple[float, float]:
    """(latency_s, bus bytes/s) for a collective over `group` GPUs."""
    if group <= hw.scale_up_domain_size:
        return scale_up_latency_s(group, hw), hw.allreduce_bus_bytes_per_s
    # Beyond the NVLink domain the slowest hop is the NIC; hierarchical algorithms still pay
    # the NVLink latency inside each domain.
    return (
        scale_up_latency_s(hw.scale_up_domain_size, hw) + hw.scale_out_latency_s,
        hw.scale_out_bytes_per_s * hw.scale_out_fraction,
    )


def allreduce_time_s(nbytes: float, group: int, hw: Hardware) -> float:
    if group <= 1 or nbytes <= 0:
        return 0.0
    latency_s, bus_bytes_per_s = _link(hw, group)
    return latency_s + 2.0 * (group - 1) / group * nbytes / bus_bytes_per_s


def allgather_time_s(nbytes: float, group: int, hw: Hardware) -> float:
    """All-gather (or reduce-scatter) of a buffer whose gathered size is `nbytes`."""
    if group <= 1 or nbytes <= 0:
        return 0.0
    latency_s, bus_bytes_per_s = _link(hw, group)
    return latency_s + (group - 1) / group * nbytes / bus_bytes_per_s


def alltoall_time_s(nbytes_per_gpu: float, group: int, hw: Hardware) -> float:
    """MoE dispatch or combine: each GPU sends (n-1)/n of its routed activations away."""
    if group <= 1 or nbytes_per_gpu <= 0:
        return 0.0
    if group <= hw.scale_up_domain_size:
        latency_s, bytes_per_s = hw.alltoall_latency_s, hw.alltoall_bytes_per_s
    else:
        latency_s = hw.alltoall_latency_s + hw.scale_out_latency_s
        bytes_per_s = hw.scale_out_bytes_per_s * hw.scale_out_fraction
    return latency_s + (group - 1) / group * nbytes_per_gpu / bytes_per_s


def p2p_time_s(nbytes: float, crosses_domain: bool, hw: Hardware) -> float:
    """Pipeline-stage send/recv of activations."""
    if nbytes <= 0:
        return 0.0
    if crosses_domain:
        return hw.scale_out_latency_s + nbytes / (hw.scale_out_bytes_per_s * hw.scale_out_fraction)
    return hw.allreduce_latency_s + nbytes / hw.scale_up_bytes_per_s


def stage_boundary_crosses(stage: int, stage_gpus: int, hw: Hardware) -> bool:
    """Does the send from pipeline stage `stage` to the next leave the NVLink domain? Stages
    fill GPUs in order, `stage_gpus` each, domains hold `scale_up_domain_size` GPUs."""
    last = (stage + 1) * stage_gpus - 1
    domain = hw.scale_up_domain_size
    return last // domain != (last + 1) // domain


def pipeline_hop_times_s(nbytes: float, stages: int, stage_gpus: int, hw: Hardware) -> list[float]:
    """Send/recv time of `nbytes` activations across each of the stages - 1 stage boundaries:
    NVLink inside a domain, the scale-out NIC where a boundary falls between nodes."""
    return [
        p2p_time_s(nbytes, stage_boundary_crosses(s, stage_gpus, hw), hw)
        for s in range(stages - 1)
    ]


def dp_gather(summed_bytes: float, padded_bytes: float, group: int,
              hw: Hardware) -> tuple[float, float]:
    """(time, bytes on the wire) of one attention-DP gather of a step's tokens (and, alike,
    the reduce back): the cheaper of the two ways SGLang's DP attention picks between
    (dp_attention.py DpPaddingMode; the summed one whenever a rank prefills). Every rank's
    rows padded to the busiest rank's and all-gathered (MAX_LEN, `padded_bytes` in all), or
    each rank's own rows written at its offset of a buffer of all the step's rows and
    all-reduced (SUM_LEN, `summed_bytes`). A rank prefilling a prompt beside ranks that
    decode a few tokens makes the padded gather `group` prompts long: the summed one wins."""
    by_gather = allgather_time_s(padded_bytes, group, hw)
    by_reduce = allreduce_time_s(summed_bytes, group, hw)
    if by_gather <= by_reduce:
        return by_gather, padded_bytes
    return by_reduce, 2 * summed_bytes
