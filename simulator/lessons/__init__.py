"""Lessons: one sweep per trade-off, each with a page that explains its own numbers."""

from simulator.lessons import (
    batch_size,
    disaggregation,
    jagged,
    kernels,
    quantization,
    sessions,
    speculative,
    stack,
    tp_vs_dp,
    traffic,
)
from simulator.lessons.core import Lesson, run_lesson

# In teaching order.
LESSONS: dict[str, Lesson] = {
    "batch-size": Lesson(
        "batch-size",
        "Small batches give each user fast tokens but few tokens per GPU and a high cost per "
        "token; large batches the opposite.",
        "deployment.scheduler.max_num_seqs", batch_size.analyze),
    "tp-vs-dp": Lesson(
        "tp-vs-dp",
        "Tensor parallelism for low latency (collectives over NVLink), attention data "
        "parallelism for total throughput (per-request speed sacrificed), on an MoE model.",
        "deployment.attention_data_parallel", tp_vs_dp.analyze, quick_requests=128),
    "quantization": Lesson(
        "quantization",
        "BF16 → FP8 → NVFP4/MXFP4 weights, activations and KV cache on H100 (no FP4 tensor "
        "cores) and B200 (FP4 tensor cores), each format with its published quality delta.",
        "deployment.precision.weights", quantization.analyze, quick_keep=4,
        quick_requests=384, rerun=("model=llama-3.1-8b", "deployment.tensor_parallel=1"),
        facet_by="hardware.gpu"),
    "speculative": Lesson(
        "speculative",
        "Code against chat acceptance, EAGLE-3 against DFlash, DSpark and MTP, and the batch "
        "past which speculative decoding stops paying.",
        speculative.LABEL, speculative.analyze, quick_requests=512, facet_by="model",
        quick_keep_by={"model": 6},
        derive=speculative.derive, label_axes=("model", "workload.arrival.concurrency")),
    "disaggregation": Lesson(
        "disaggregation",
        "Prefill and decode on their own GPUs: more good requests per GPU at the same TPOT for "
        "long prompts, an xPyD split matched to the mix, and no gain for short prompts.",
        disaggregation.LAYOUT, disaggregation.analyze,
        quick_keep_by={"deployment": 4, "workload.arrival.concurrency": 4}, quick_requests=400,
        facet_by=disaggregation.TRAFFIC, derive=disaggregation.derive,
        label_axes=("workload.arrival.concurrency",)),
    "jagged": Lesson(
        "jagged",
        "The frontier is jagged: one small step (a few more users than the KV cache holds) "
        "makes a large jump, located and explained from the step breakdown.",
        "workload.arrival.concurrency", jagged.analyze, quick_keep=9,
        quick_requests=160),
    "stack": Lesson(
        "stack",
        "The gains multiply: FP8, then FP4 on B200, then speculative decoding, then P/D on the "
        "same four GPUs, each frontier over the last, and where a step does not multiply.",
        stack.STAGE, stack.analyze, quick_requests=200,
        quick_keep_by={"hardware.gpu": 5, stack.LOAD: 5}, derive=stack.derive,
        rerun=("workload.kind=code",), label_axes=(stack.LOAD,)),
    "traffic": Lesson(
        "traffic",
        "No config is best for every workload: one model on eight GPUs under chat, code "
        "completion, summarization and reasoning traffic, and the winner of each SLO tier.",
        traffic.LAYOUT, traffic.analyze, quick_requests=160,
        quick_keep_by={traffic.INPUTS: 4, "deployment.tensor_parallel": 3,
                       traffic.LOAD: 4},
        facet_by=traffic.TRAFFIC, derive=traffic.derive, rerun=("model=qwen3-32b",),
        label_axes=(traffic.LOAD,)),
    "kernels": Lesson(
        "kernels",
        "A leaner forward pass pushes the whole frontier: unfused experts against a fused "
        "MoE, eager launch against CUDA graphs, FlashAttention-2 against -3, serial host work "
        "against an overlapped scheduler.",
        kernels.STAGE, kernels.analyze, quick_requests=300,
        quick_keep_by={kernels.LOAD: 3, "deployment.engine_version": 5}, derive=kernels.derive,
        rerun=("hardware.gpu=b200",), label_axes=(kernels.LOAD,)),
    "sessions": Lesson(
        "sessions",
        "Agent sessions on the same four GPUs without and with prefix caching, cache-aware "
        "routing and a host-memory KV tier: sessions per GPU at an SLO, and the cache "
        "figures behind them.",
        sessions.STAGE, sessions.analyze, quick_requests=800,
        quick_keep_by={"deployment.router": 4, sessions.LOAD: 3}, derive=sessions.derive,
        rerun=("hardware.gpu=h200-sxm",), label_axes=(sessions.LOAD,)),
}

__all__ = ["LESSONS", "Lesson", "run_lesson"]
