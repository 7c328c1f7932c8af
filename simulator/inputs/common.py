"""Building blocks shared by the scenario schema's parts: strict models, bounded numbers, and
tagged unions chosen by `kind` (their pydantic tags end in `-tag` so error locations read
`workload.arrival.rate_per_s`, not `workload.arrival.poisson...`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0)]
# Token counts: beyond any context window (such requests are dropped), but within int64 math.
MAX_TOKENS = 1_000_000_000
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
NumberFormat = Literal["bf16", "fp16", "fp8", "mxfp4", "nvfp4", "int8", "int4"]
WEIGHT_ONLY_FORMATS = frozenset({"int4"})  # group-quantized (AWQ/GPTQ): no int4 activations


def _invalid(message: str, kind: str = "invalid_value") -> PydanticCustomError:
    """A validation error whose message is exactly `message` (no 'Value error, ' prefix)."""
    return PydanticCustomError(kind, "{message}", {"message": message})


def _list_as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


# A YAML list for a tuple field, in strict mode (which takes only a tuple for a tuple).
AsTuple = BeforeValidator(_list_as_tuple)


class _Strict(BaseModel):
    # allow_inf_nan=False: no key means anything at .inf or .nan (rates, lengths, times).
    # strict: a boolean or a string is no number (`tensor_parallel: true` was taken as 1,
    # `"4"` as 4); an integer still counts as a float. Tuple fields take a list (AsTuple).
    # defer_build: a schema is built on first validation, not at import (start-up time), and
    # only for the models validated directly (a parent's schema inlines its children's).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                              defer_build=True, strict=True)


class HardwareConfig(_Strict):
    """Which GPU and how many: the profile name and the machine shape."""

    gpu: Annotated[str, Field(min_length=1)]  # hardware profile name, e.g. h200-sxm
    # GPUs in one scale-up (NVLink) domain: a replica must fit in one to use NVLink.
    gpus_per_node: Annotated[int, Field(ge=1, le=72)] = 8
    # Machines of gpus_per_node GPUs; the deployment's GPUs must fit in nodes x gpus_per_node.
    nodes: Annotated[int, Field(ge=1, le=100_000)] = 1


# ---------------------------------------------------------------------------- tagged unions


def _tag_of(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, Mapping) else getattr(value, "kind", None)
    return f"{kind}-tag" if isinstance(kind, str) else None


def _kind_checker(
    where: str, variants: Mapping[str, type[BaseModel]], default: str | None = None
) -> Callable[[Any], Any]:
    """Before-validator: a clear sentence for a missing or unknown `kind`; fills the default."""
    valid = ", ".join(variants)

    def check(value: Any) -> Any:
        if isinstance(value, BaseModel):
            return value
        if not isinstance(value, Mapping):
            raise _invalid(f"{where} must be a mapping with a kind (one of: {valid})")
        kind = value.get("kind", default)
        if kind is None:
            raise _invalid(f"{where} needs a kind (one of: {valid})", "missing")
        if not isinstance(kind, str) or kind not in variants:  # a list or dict is unhashable
            raise _invalid(f"{where} kind {kind!r} is not one of: {valid}")
        return value if "kind" in value else {**value, "kind": kind}

    return check
