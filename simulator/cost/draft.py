"""What a speculative step costs: the drafter's passes plus the target's verify pass.

The target verifies k draft tokens per decoding sequence in one forward over k+1 query
positions (`BatchShape.speculative_tokens_per_seq`), which is nearly free while decode is
memory-bound and costs k+1 times the GEMM work once it is compute-bound. The drafter is costed
through its own `StepModel`, by method:

- draft_model: a separate small model, k sequential single-token passes;
- eagle3: k sequential passes of a one-layer dense head at the target's width, plus its
  draft-vocabulary LM head each pass (EAGLE-3 drafts from the target's hidden states);
- mtp: k sequential passes of the model's own extra layers (DeepSeek-V3/R1 carry one);
- dflash, dspark: one parallel pass over the k-token block of a small drafter (its shape is
  not in our references: one target-shaped layer unless `draft_model` names its config);
- ngram: prompt lookup on the host, no GPU work.

Tree drafting (EAGLE-2/3, `tree_tokens` and `tree_top_k`): the target verifies the whole tree,
`tree_tokens` positions per sequence under a tree attention mask, and each sequential draft
pass after the first runs `tree_top_k` tokens per sequence (the nodes expanded at that depth).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from simulator.cost.ops import OpCost
from simulator.cost.shape import BatchShape, StepCost
from simulator.cost.step import StepModel
from simulator.model.architecture import Architecture

SEQUENTIAL = frozenset({"draft_model", "eagle3", "mtp"})
PARALLEL = frozenset({"dflash", "dspark"})


# EAGLE-3 heads predict over a reduced draft vocabulary mapped onto the target's
# (vllm-project/speculators Eagle3SpeculatorConfig: a 32K draft vocabulary beside the target's
# 128K), so each draft pass's LM head is a quarter of a Llama-3 one.
EAGLE3_DRAFT_VOCAB = 32_000


# EAGLE-3 fuses the target's low, middle and high layer hidden states (vLLM llama_eagle3.py:
# fc input 3 x target_hidden_size).
EAGLE3_FUSED_LAYERS = 3


# A DeepSeek-V3 MTP module projects [norm(embedding); norm(previous hidden)] back to the hidden
# width before its decoder block (eh_proj, 2 x hidden -> hidden; DeepSeek-V3 report section 2.2).
MTP_FUSED_INPUTS = 2


def eagle_head(arch: Architecture) -> Architecture:
    """One dense decoder layer at the target's width with a draft-vocabulary LM head (the
    EAGLE-3 draft head): its attention reads [token embedding; hidden state], 2 x hidden
    wide, and its fc fuses three target hidden states (3 x hidden -> hidden)."""
    return dataclasses.replace(
        arch,
        name=f"{arch.name} eagle3 head",
        num_layers=1,
        qkv_input_size=2 * arch.hidden_size,
        fused_hidden_states=EAGLE3_FUSED_LAYERS,
        vocab_size=min(arch.vocab_size, EAGLE3_DRAFT_VOCAB),
        moe=None,
        sliding_window=None,
        num_sliding_layers=0,
        num_mtp_layers=0,
        sparse=None,  # an EAGLE-3 head attends densely (no indexer of its own)
        linear=None,  # a Llama-style decoder layer: softmax attention, ungated heads
        attn_output_gate=False,
    )


def mtp_module(arch: Architecture) -> Architecture:
    """The model's own MTP layers: decoder layers of the target's kind (MoE where it is),
    each behind its eh_proj input projection."""
    if arch.num_mtp_layers < 1:
        raise ValueError(
            f"speculative.method: mtp needs a model with multi-token-prediction layers; "
            f"{arch.name} has none (num_nextn_predict_layers is 0 or absent in its config)"
        )
    moe = arch.moe
    if moe is not None:
        moe = dataclasses.replace(moe, first_dense_layers=0, moe_layer_interval=1)
    return dataclasses.replace(
        arch,
        name=f"{arch.name} mtp",
        num_layers=arch.num_mtp_layers,
        fused_hidden_states=MTP_FUSED_INPUTS,
        moe=moe,
        sliding_window=None,
        num_sliding_layers=0,
        num_mtp_layers=0,
        linear=None,  # Qwen3.5's MTP layer attends fully (mtp_num_hidden_layers)
    )


@dataclass(frozen=True)
class SpeculativeStepModel:
    """A target `StepModel` plus its drafter: costs a step as draft passes + verify pass.

    A batch with `speculative_tokens_per_seq == 0` (speculation off for the step) costs exactly
    what the target alone does.
    """

    target: StepModel
    method: str
    drafter: StepModel | None  # None: n-gram drafting (no GPU work)
    block_tokens: int = 0  # dflash/dspark: the block drafted in one pass (0: the verified k)
    tree_tokens: int = 0  # tree drafting: positions verified per sequence (0: a k-token chain)
    tree_top_k: int = 1  # tree drafting: tokens per sequence in each draft pass after the first
    _draft_cache: dict[tuple[int, int, int], float] = field(
        default_factory=dict, repr=False, compare=False
    )

    def draft_shapes(self, b: BatchShape) -> list[BatchShape]:
        """The drafter's passes for the decoders of `b` (none when nothing is drafted)."""
        k, n = b.speculative_tokens_per_seq, b.decode_seqs
        if self.drafter is None or k == 0 or n == 0:
            return []
        ctx = b.decode_context_tokens
        if self.method in PARALLEL:
            # One pass over the whole block, whatever length is verified (DSpark verifies a
            # confidence-chosen prefix): block query positions per sequence.
            block = self.block_tokens or k
            return [BatchShape(decode_seqs=n, decode_context_tokens=ctx,
                               speculative_tokens_per_seq=block - 1)]
        # Sequential: pass j drafts token j, one position further along each context; in a
        # tree every pass after the first expands top_k tokens per sequence.
        wide = self.tree_top_k - 1 if self.tree_tokens else 0
        return [
            BatchShape(decode_seqs=n, decode_context_tokens=ctx + j * n,
                       speculative_tokens_per_seq=wide if j else 0)
            for j in range(k)
        ]

    def verify_shape(self, b: BatchShape) -> BatchShape:
        """The target's verify pass of `b`: its k + 1 chain positions per sequence, or the
        whole tree's `tree_tokens`."""
        if not self.tree_tokens or b.speculative_tokens_per_seq == 0 or b.decode_seqs == 0:
            return b
        return dataclasses.replace(b, speculative_tokens_per_seq=self.tree_tokens - 1)

    def fuse_ops(self, b: BatchShape) -> list[OpCost]:
        """The drafter's input projection, a replicated BF16 linear. EAGLE-3's fc runs once per
        step on the target hidden states of the positions just verified along the chain, k + 1
        per sequence (a tree's accepted path is at most that long), 3 x hidden -> hidden. MTP's
        eh_proj runs in every draft pass on that pass's token per sequence, [embedding;
        hidden] 2 x hidden -> hidden (vLLM deepseek_mtp.py: a plain nn.Linear)."""
        k, n = b.speculative_tokens_per_seq, b.decode_seqs
        if self.drafter is None or k == 0 or n == 0:
            return []
        a = self.drafter.arch
        if a.fused_hidden_states == 0:
            return []
        h, width = a.hidden_size, a.fused_hidden_states * a.hidden_size
        if self.method == "mtp":  # k passes, one launch each
            return [self.drafter.gemm("mtp_eh_proj", n, h, width, k, bf16=True)]
        return [self.drafter.gemm("fuse_hidden_fc", n * (k + 1), h, width, 1, bf16=True)]

    def draft_s(self, b: BatchShape) -> float:
        """GPU seconds of the drafter's passes for `b` (memoized by decoders, k and context)."""
        if self.drafter is None or b.speculative_tokens_per_seq == 0 or b.decode_seqs == 0:
            return 0.0
        key = (b.decode_seqs, b.speculative_tokens_per_seq, b.decode_context_tokens)
        t = self._draft_cache.get(key)
        if t is None:
            drafter = self.drafter
            t = sum(o.time_s for o in self.fuse_ops(b))
            t += sum(drafter.time_s(s) for s in self.draft_shapes(b))
            if len(self._draft_cache) < 1_000_000:
                self._draft_cache[key] = t
        return t

    def verify_s(self, b: BatchShape) -> float:
        """GPU seconds of the target's verify pass for `b`."""
        return self.target.time_s(self.verify_shape(b))

    def time_s(self, b: BatchShape) -> float:
        return self.verify_s(b) + self.draft_s(b)

    def cost(self, b: BatchShape) -> StepCost:
        """The target's verify rows, then the drafter's rows prefixed `draft_`."""
        verify = self.target.cost(self.verify_shape(b))
        if self.drafter is None:
            return verify
        rows: list[OpCost] = list(verify.ops)
        compute, memory, comm, overhead = (
            verify.compute_s, verify.memory_s, verify.communication_s, verify.overhead_s
        )
        fuse = self.fuse_ops(b)
        costs = [StepCost.from_ops(fuse)] if fuse else []
        costs.extend(self.drafter.cost(shape) for shape in self.draft_shapes(b))
        for c in costs:
            rows.extend(dataclasses.replace(o, op=f"draft_{o.op}") for o in c.ops)
            compute += c.compute_s
            memory += c.memory_s
            comm += c.communication_s
            overhead += c.overhead_s
        return StepCost(compute + memory + comm + overhead, tuple(rows), compute, memory, comm,
                        overhead)

    def decode_times_s(self, *args: object) -> object:
        raise NotImplementedError("speculative steps are costed one by one")


def make_drafter(
    method: str, target: StepModel, draft_arch: Architecture | None
) -> StepModel | None:
    """The drafter's StepModel on the target's GPU, layout and formats (None for n-gram)."""
    if method == "ngram":
        return None
    if draft_arch is None:
        if method == "draft_model":
            raise ValueError("speculative.method: draft_model needs draft_model")
        draft_arch = mtp_module(target.arch) if method == "mtp" else eagle_head(target.arch)
    return StepModel(draft_arch, target.hw, target.layout, target.formats, target.comm_overlap)


def verify_and_draft_s(model: SpeculativeStepModel, b: BatchShape) -> tuple[float, float]:
    """(verify, draft) GPU seconds of one step: the split `frontier simulate` reports."""
    return model.verify_s(b), model.draft_s(b)
