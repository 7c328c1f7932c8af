"""Pure physics: FLOPs, bytes and time of one engine step, memory fit and collectives."""

from simulator.cost.attention import prefill_pairs
from simulator.cost.layout import Formats, LayoutError, ParallelLayout
from simulator.cost.memory import MemoryBudget, MemoryFitError, memory_budget, require_fit
from simulator.cost.ops import OpCost
from simulator.cost.shape import BatchShape, StepCost
from simulator.cost.step import StepModel

__all__ = [
    "BatchShape",
    "Formats",
    "LayoutError",
    "MemoryBudget",
    "MemoryFitError",
    "OpCost",
    "ParallelLayout",
    "StepCost",
    "StepModel",
    "memory_budget",
    "prefill_pairs",
    "require_fit",
]
