"""The validation rows, one strict YAML file per published source (validation/sources/).

Each file holds its source's citation once (`source`, `subset`), optional `defaults` (row keys
every row of the file shares), `causes` (name -> an explanation, written once however many rows
name it), its shared setups (`goodputs` for goodput-ratio rows, `sweep` for concurrency-sweep
rows) and its `rows`, in the order they are reported. A row holds its setup (the scenario
columns rows.py turns into a scenario), its measured value, unit, tolerance, `pending`
(non-empty: what the simulator still lacks to run it), `note` (assumptions), its `likely_cause`
(the explanation printed among the largest errors: a `sign` saying which way the prediction
misses, the `predicted` value it was written against, a short `text` of its own and/or one of
the file's `causes`; tests/test_validation_causes.py holds each to the current prediction) and,
where it is not scored through one plain simulation, its own setup: `speculative_setup` (a
`deployment.speculative` block plus workload / deployment keys merged into its scenario; metric
`speedup` divides output tokens/s with speculation by the same scenario without it,
`acceptance_length` scores the simulated mean tokens per verify step), `goodput_ratio`
([numerator, denominator] of the file's goodputs, or {min|max: [[n, d], ...]} over a published
range) or `sweep_ratio` (two sides of the file's sweep and a per-user speed). Files are read in
name order; unknown keys are errors, one line naming the file, the row id and the key.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.errors import InputError
from simulator.inputs.yamlfile import load_yaml_mapping

HERE = Path(__file__).parent
SOURCES = HERE / "sources"
RATIO_METRIC = "slo_rate_ratio"  # scored by slo_rate.py from the row's goodput_ratio
SWEEP_METRIC = "speed_target_throughput_ratio"  # scored by sweep_rows.py from its sweep_ratio

# Scenario columns of a row: integer ones, decimal ones; the rest are text.
INT_KEYS = (
    "num_gpus", "tensor_parallel", "replicas", "concurrency", "input_tokens", "output_tokens",
    "num_requests", "max_num_seqs", "max_num_batched_tokens", "expert_parallel",
    "recv_interval_steps",
)
FLOAT_KEYS = ("length_min_ratio", "gpu_memory_utilization", "request_latency_s")
TEXT_KEYS = ("model", "gpu", "weights", "activations", "kv_cache", "engine", "arrival", "keep_bf16")
# Every row key that rows.Row.fields carries, in the order of the former CSV's columns.
FIELD_ORDER = (
    "id", "subset", "source", "model", "gpu", "num_gpus", "tensor_parallel", "replicas",
    "weights", "activations", "kv_cache", "engine", "arrival", "concurrency", "input_tokens",
    "output_tokens", "num_requests", "max_num_seqs", "max_num_batched_tokens", "metric",
    "measured", "unit", "tolerance_pct", "pending", "note", "expert_parallel",
    "length_min_ratio", "gpu_memory_utilization", "recv_interval_steps", "keep_bf16",
    "request_latency_s",
)
# Length limits of the explanations: a row's own text, a cause of the file's `causes`.
ROW_TEXT_MAX = 300
CAUSE_TEXT_MAX = 2000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SpeculativeSetup(_Strict):
    speculative: dict[str, Any]
    workload: dict[str, Any] = {}
    deployment: dict[str, Any] = {}


class RangeRatio(_Strict):
    min: list[tuple[str, str]] | None = None
    max: list[tuple[str, str]] | None = None

    @model_validator(mode="after")
    def _one(self) -> RangeRatio:
        if (self.min is None) == (self.max is None):
            raise ValueError("give exactly one of min or max")
        return self


class SweepRatio(_Strict):
    numerator: str
    denominator: str
    speed_per_user: float


class Goodput(_Strict):
    bracket_per_s: tuple[float, float]
    scenario: dict[str, Any]
    per_gpu: bool = False


class Sweep(_Strict):
    concurrencies: list[int]
    requests_per_concurrency: int
    sides: dict[str, dict[str, Any]]


class LikelyCause(_Strict):
    """Why a row's prediction misses its measurement (or, `within`, why it now meets it).
    `sign` is the direction the explanation explains: `under` (predicted below measured by more
    than the row's tolerance), `over` (above by more) or `within`; `predicted` the value the
    text was written against, in the row's unit; `cause` one of the file's `causes`; `text`
    what is particular to the row. The test holds sign and predicted to the current run."""

    sign: Literal["under", "over", "within"]
    predicted: float | None = None
    cause: str = ""
    text: Annotated[str, Field(max_length=ROW_TEXT_MAX)] = ""

    @model_validator(mode="after")
    def _says_why(self) -> LikelyCause:
        if not (self.cause or self.text):
            raise ValueError("give a cause (one of the file's causes), a text or both")
        return self


class RowSpec(_Strict):
    id: str
    subset: str
    source: str
    metric: str
    unit: str = ""
    measured: float | None = None
    tolerance_pct: float = 3
    pending: str = ""
    note: str = ""
    likely_cause: LikelyCause | None = None
    # Why the row cannot test the simulator's fidelity, when it cannot: `in-sample` (a shipped
    # value was fitted to the data it scores), `insensitive` (its prediction does not move with
    # the GPU profile it names); kept out of the headline errors and reported apart, with
    # `check_reason`. Acceptance-only rows are sampler checks by their metric.
    check: Literal["in-sample", "insensitive"] | None = None
    check_reason: str = ""
    # A ratio row's published numerator and denominator (in `parts_unit`): scored too, so a
    # ratio that is right because two parts are wrong alike shows it (issue 29).
    measured_parts: tuple[float, float] | None = None
    parts_unit: str = ""
    model: str = ""
    gpu: str = ""
    weights: str = ""
    activations: str = ""
    kv_cache: str = ""
    engine: str = ""
    arrival: str = ""
    keep_bf16: str = ""
    num_gpus: int | None = None
    tensor_parallel: int | None = None
    replicas: int | None = None
    concurrency: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    num_requests: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    expert_parallel: int | None = None
    recv_interval_steps: int | None = None
    length_min_ratio: float | None = None
    gpu_memory_utilization: float | None = None
    # The measuring harness's request latency (deployment.overhead.request_latency_s) where it
    # is not the engine style's: 0 for a script that drives the engine in process.
    request_latency_s: float | None = Field(default=None, ge=0)
    speculative_setup: SpeculativeSetup | None = None
    goodput_ratio: tuple[str, str] | RangeRatio | None = None
    sweep_ratio: SweepRatio | None = None

    @model_validator(mode="after")
    def _parts_are_the_ratio(self) -> RowSpec:
        parts = self.measured_parts
        if parts is None:
            return self
        if min(parts) <= 0 or self.measured is None:
            raise ValueError("measured_parts must be two positive numbers beside measured")
        if not ((self.goodput_ratio is not None and not isinstance(self.goodput_ratio, RangeRatio))
                or self.metric == "speedup"):
            raise ValueError("measured_parts applies to a [numerator, denominator] goodput "
                             "ratio or a speed-up row")
        if abs(parts[0] / parts[1] / self.measured - 1) > 0.01:
            raise ValueError(f"measured_parts {parts[0]:g} / {parts[1]:g} is not measured "
                             f"{self.measured:g} (within 1 %)")
        return self

    @model_validator(mode="after")
    def _check_says_why(self) -> RowSpec:
        if (self.check is None) != (not self.check_reason):
            raise ValueError("check and check_reason go together (the kind and why)")
        return self

    def fields(self) -> dict[str, str]:
        """The row's columns as text, empty where unset (what rows.Row.fields holds)."""
        out = {}
        for k in FIELD_ORDER:
            v = getattr(self, k)
            if v is None:
                out[k] = ""
            elif k in INT_KEYS:
                out[k] = str(int(v))
            elif k == "tolerance_pct":
                out[k] = str(int(v)) if float(v).is_integer() else str(v)
            else:
                out[k] = str(v)
        return out


class SourceFile(_Strict):
    source: str
    subset: str
    defaults: dict[str, Any] = {}
    causes: dict[str, Annotated[str, Field(min_length=1, max_length=CAUSE_TEXT_MAX)]] = {}
    goodputs: dict[str, Goodput] = {}
    sweep: Sweep | None = None
    rows: list[dict[str, Any]]


class Source(_Strict):
    path: Path
    source: str
    causes: dict[str, str]
    goodputs: dict[str, Goodput]
    sweep: Sweep | None
    rows: list[RowSpec]


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(file)"


def _fail(path: Path, what: str, exc: ValidationError) -> InputError:
    err = exc.errors()[0]
    return InputError(f"{path}: {what}{_where(err['loc'])}: {err['msg']}")


def load_source(path: Path) -> Source:
    """One source file, every row checked; InputError (one line) on the first problem."""
    doc = load_yaml_mapping(path, "validation source", "source, subset, defaults and rows")
    try:
        head = SourceFile.model_validate(doc)
    except ValidationError as exc:
        raise _fail(path, "", exc) from None
    if "id" in head.defaults:
        raise InputError(f"{path}: defaults.id: each row names its own id")
    rows = []
    for i, raw in enumerate(head.rows):
        rid = raw.get("id", f"#{i}")
        merged = {"source": head.source, "subset": head.subset, **head.defaults, **raw}
        try:
            row = RowSpec.model_validate(merged)
        except ValidationError as exc:
            raise _fail(path, f"row {rid}: ", exc) from None
        _check_cause(path, row, head)
        _check_setup(path, row, head)
        rows.append(row)
    named = {r.likely_cause.cause for r in rows if r.likely_cause is not None}
    for name in head.causes:
        if name not in named:
            raise InputError(f"{path}: causes.{name}: no row's likely_cause names it")
    return Source(path=path, source=head.source, causes=head.causes, goodputs=head.goodputs,
                  sweep=head.sweep, rows=rows)


def _check_cause(path: Path, row: RowSpec, head: SourceFile) -> None:
    lc = row.likely_cause
    if lc is None:
        return
    where = f"{path}: row {row.id}: likely_cause"
    if row.pending:
        raise InputError(f"{where}: a pending row is not scored; say why in its pending")
    if lc.cause and lc.cause not in head.causes:
        raise InputError(f"{where}.cause: no cause {lc.cause!r} in the file's causes")


def _check_setup(path: Path, row: RowSpec, head: SourceFile) -> None:
    where = f"{path}: row {row.id}"
    if row.pending:
        return
    if (row.metric == RATIO_METRIC) != (row.goodput_ratio is not None):
        raise InputError(f"{where}: goodput_ratio: metric {RATIO_METRIC} needs one (and only it)")
    if (row.metric == SWEEP_METRIC) != (row.sweep_ratio is not None):
        raise InputError(f"{where}: sweep_ratio: metric {SWEEP_METRIC} needs one (and only it)")
    names: list[str] = []
    if isinstance(row.goodput_ratio, tuple):
        names = list(row.goodput_ratio)
    elif row.goodput_ratio is not None:
        names = [n for pair in (row.goodput_ratio.min or row.goodput_ratio.max or []) for n in pair]
    for n in names:
        if n not in head.goodputs:
            raise InputError(f"{where}: goodput_ratio: no goodput {n!r} in the file's goodputs")
    if row.sweep_ratio is not None:
        sides = head.sweep.sides if head.sweep else {}
        for n in (row.sweep_ratio.numerator, row.sweep_ratio.denominator):
            if n not in sides:
                raise InputError(f"{where}: sweep_ratio: no side {n!r} in the file's sweep")


@cache
def sources(folder: Path = SOURCES) -> tuple[Source, ...]:
    """Every source file of the folder, in file-name order; row ids and cause names unique
    across them."""
    out = tuple(load_source(p) for p in sorted(folder.glob("*.yaml")))
    seen: dict[str, Path] = {}
    named: dict[str, Path] = {}
    for s in out:
        for r in s.rows:
            if r.id in seen:
                raise InputError(f"{s.path}: row {r.id}: id also in {seen[r.id]}")
            seen[r.id] = s.path
        for name in s.causes:
            if name in named:
                raise InputError(f"{s.path}: causes.{name}: name also in {named[name]}")
            named[name] = s.path
    return out


def all_rows() -> list[RowSpec]:
    return [r for s in sources() for r in s.rows]


def speculative_setups() -> dict[str, dict[str, Any]]:
    """Row id -> its speculative setup as written ({speculative, workload?, deployment?})."""
    return {
        r.id: r.speculative_setup.model_dump(exclude_unset=True)
        for r in all_rows()
        if r.speculative_setup is not None
    }


def goodput_spec() -> dict[str, Any]:
    """{goodputs: name -> {bracket_per_s, scenario, per_gpu}, rows: id -> ratio} of every source."""
    goodputs: dict[str, Any] = {}
    rows: dict[str, Any] = {}
    for s in sources():
        for name, g in s.goodputs.items():
            goodputs[name] = g.model_dump()
        for r in s.rows:
            ratio = r.goodput_ratio
            if isinstance(ratio, tuple):
                rows[r.id] = list(ratio)
            elif ratio is not None:
                how: Literal["min", "max"] = "min" if ratio.min is not None else "max"
                rows[r.id] = {how: [list(p) for p in getattr(ratio, how)]}
    return {"goodputs": goodputs, "rows": rows}


def sweep_spec() -> dict[str, Any]:
    """{concurrencies, requests_per_concurrency, sides, rows: id -> {numerator, denominator,
    speed_per_user}} of the one source with a sweep."""
    with_sweep = [s for s in sources() if s.sweep is not None]
    if len(with_sweep) != 1:
        raise InputError(f"{SOURCES}: expected one source file with a sweep, not {len(with_sweep)}")
    src = with_sweep[0]
    assert src.sweep is not None
    return {
        **src.sweep.model_dump(),
        "rows": {r.id: r.sweep_ratio.model_dump() for r in src.rows if r.sweep_ratio is not None},
    }


def likely_causes() -> dict[str, LikelyCause]:
    """Row id -> its likely cause, for the rows that give one."""
    return {r.id: r.likely_cause for r in all_rows() if r.likely_cause is not None}


def shared_causes() -> dict[str, str]:
    """Cause name -> its text, over every source file (names are unique across them)."""
    return {name: text for s in sources() for name, text in s.causes.items()}
