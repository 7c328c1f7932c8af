"""Reader of AIConfigurator-style silicon calibration CSVs (reference/silicon_calibration.csv).

Columns relied on (README of the reference folder): id, backend, backend_version, model, gpu,
precision, gemm_quant_mode, moe_quant_mode, mode (agg|disagg), isl, osl, concurrency,
batch_size, tp_size, pp_size, attention_dp_size, moe_tp_size, moe_ep_size, the same layout
per `prefill_`/`decode_` pool with `_num_workers` and `_batch_size`, ttft_ms and tpot_ms.
An empty layout field was not recorded (0 in a moe_ field means the same: no MoE split).

The workload is AIConfigurator's benchmark: aiperf, closed loop at `concurrency`, fixed `isl`
input and `osl` output tokens, 20 x concurrency measured requests after a warm-up of
`concurrency` requests; the measured figures are mean TTFT and mean TPOT.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

from simulator.errors import InputError
from simulator.measured.id_layout import complete_pd_layouts, measurement, name_layouts
from simulator.measured.run import (
    LAYOUT_CONTRADICTED,
    Load,
    MeasuredRun,
    Pool,
    bad,
    integer,
    number,
)

ENGINES = ("vllm", "sglang", "trtllm")
MODES = ("agg", "disagg")
QUANT_MODES = ("", "bf16", "fp8", "fp8_block", "nvfp4", "int4_wo")
PRECISIONS = ("", "bf16", "fp8", "fp4", "int4")
MEASURED_PER_CONCURRENCY = 20  # AIConfigurator's sflow.py: 20 x concurrency requests scored

REQUIRED = (
    "backend", "backend_version", "model", "gpu", "precision", "gemm_quant_mode",
    "moe_quant_mode", "mode", "isl", "osl", "concurrency", "tp_size", "pp_size",
    "attention_dp_size", "moe_tp_size", "moe_ep_size", "ttft_ms", "tpot_ms",
)
POOL_FIELDS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


def looks_like_silicon(header: list[str]) -> bool:
    """Whether a CSV header is this format's (the columns every row needs)."""
    return all(c in header for c in REQUIRED)


def read_silicon(path: Path) -> list[MeasuredRun]:
    """Every row of the file as a MeasuredRun; a bad row is one InputError naming it."""
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise InputError(
                    f"{path}: missing column {missing[0]!r} (a silicon calibration CSV has "
                    f"{', '.join(REQUIRED)}, and prefill_/decode_ pool columns for disagg rows)"
                )
            runs = []
            for i, raw in enumerate(reader, start=1):
                if None in raw or any(v is None for v in raw.values()):
                    raise InputError(
                        f"{path}: row {i}: has {sum(v is not None for k, v in raw.items() if k)} "
                        f"fields where the "
                        f"header names {len(header)} (truncated or malformed row)"
                    )
                runs.append(_row(path, i, {k: (v or "").strip() for k, v in raw.items()}))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path}: not a readable CSV ({exc})") from None
    if not runs:
        raise InputError(f"{path}: no data rows")
    return _mark_contradictions(complete_pd_layouts(name_layouts(runs)))


def _mark_contradictions(runs: list[MeasuredRun]) -> list[MeasuredRun]:
    """Runs whose exact measurement (the same TTFT and TPOT to every digit, same engine,
    GPU, lengths and load) the file lists again under a different layout: one measured run
    rendered two ways (the file also names some of these DeepSeek-R1 in one rendering and
    DeepSeek-V3 in the other, the same architecture), so the file leaves its layout in doubt. Each
    such run notes the rows that contradict it (scenario.py declares it; reports score it
    apart, as they do P/D rows without worker counts). Layouts compare as the runs are mapped
    (`named_pools` where a name says what ran), so two renderings of one measurement that
    agree once read so do not contradict each other."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, r in enumerate(runs):
        groups.setdefault(measurement(r), []).append(i)
    out = list(runs)
    layouts = [r.named_pools or r.pools for r in runs]
    for members in groups.values():
        if len({layouts[i] for i in members}) < 2:
            continue
        for i in members:
            others = [runs[j] for j in members if layouts[j] != layouts[i]]
            rows = ", ".join(str(o.row) for o in others[:3])
            out[i] = replace(runs[i], notes=(*runs[i].notes,
                                            f"{LAYOUT_CONTRADICTED} (rows {rows})"))
    return out


def _row(path: Path, i: int, r: dict[str, str]) -> MeasuredRun:
    where = f"{path}: row {i}"
    _choice(where, r, "backend", ENGINES)
    _choice(where, r, "mode", MODES)
    _choice(where, r, "gemm_quant_mode", QUANT_MODES)
    _choice(where, r, "moe_quant_mode", QUANT_MODES)
    _choice(where, r, "precision", PRECISIONS)
    _check_precision(where, r)
    for key in ("model", "gpu"):
        if not r[key]:
            raise bad(where, key, r[key], "a model or GPU name")
    conc = integer(where, "concurrency", r["concurrency"])
    if r["mode"] == "agg":
        pools: tuple[Pool, ...] = (_pool(where, r, "", r.get("batch_size", "")),)
    else:
        pools = tuple(
            _pool(where, r, f"{side}_", r.get(f"{side}_batch_size", ""))
            for side in ("prefill", "decode")
        )
    load = Load(
        num_requests=MEASURED_PER_CONCURRENCY * conc,
        warmup_requests=conc,
        concurrency=conc,
        input_tokens=integer(where, "isl", r["isl"]),
        output_tokens=integer(where, "osl", r["osl"]),
    )
    return MeasuredRun(
        source=str(path), row=i, run_id=r.get("id") or f"row-{i}", format="silicon",
        load=load,
        measured={
            "ttft.mean": number(where, "ttft_ms", r["ttft_ms"]),
            "tpot.mean": number(where, "tpot_ms", r["tpot_ms"]),
        },
        engine=r["backend"], engine_version=r["backend_version"] or None,
        model=r["model"], gpu=r["gpu"], gemm_quant=r["gemm_quant_mode"],
        moe_quant=r["moe_quant_mode"], mode=r["mode"], pools=pools,
    )


# The `precision` column names the family the two quant modes belong to.
_FAMILY = {"": ("", "bf16"), "bf16": ("", "bf16"), "fp8": ("fp8", "fp8_block"),
           "nvfp4": ("fp4",), "int4_wo": ("int4",)}


def _check_precision(where: str, r: dict[str, str]) -> None:
    """The quant modes agree with the `precision` column (fp8_block is FP8, nvfp4 is FP4)."""
    for key in ("gemm_quant_mode", "moe_quant_mode"):
        mode = "fp8" if r[key] == "fp8_block" else r[key]
        if r["precision"] not in _FAMILY[mode]:
            raise InputError(
                f"{where}: {key} {r[key] or 'empty'!r} contradicts precision "
                f"{r['precision'] or 'empty'!r} (valid with it: "
                f"{', '.join(k or 'empty' for k, v in _FAMILY.items() if r['precision'] in v)})"
            )


def _choice(where: str, r: dict[str, str], key: str, valid: tuple[str, ...]) -> None:
    if r[key] not in valid:
        raise bad(where, key, r[key], "one of " + ", ".join(v or "empty" for v in valid))


def _pool(where: str, r: dict[str, str], prefix: str, batch: str) -> Pool:
    """One pool's layout; an empty (or, for the moe_ fields, 0) value was not recorded."""

    def opt(name: str, zero_is_unset: bool = False) -> int | None:
        key = prefix + name
        value = r.get(key, "")
        if value == "" or (zero_is_unset and value == "0"):
            return None
        return integer(where, key, value)

    tp = opt("tp_size")
    if tp is None:
        raise bad(where, prefix + "tp_size", "", f"a whole number >= 1 for a {r['mode']} row")
    pool = Pool(
        tensor_parallel=tp,
        pipeline_parallel=opt("pp_size") or 1,
        attention_data_parallel=opt("attention_dp_size"),
        moe_tensor_parallel=opt("moe_tp_size", zero_is_unset=True),
        expert_parallel=opt("moe_ep_size", zero_is_unset=True),
        workers=opt("num_workers") if prefix else None,
        max_batch=integer(where, prefix + "batch_size", batch) if batch else None,
    )
    _check_moe_split(where, prefix, pool)
    return pool


def _check_moe_split(where: str, prefix: str, p: Pool) -> None:
    """AIConfigurator splits a replica's MoE layers moe_tp x moe_ep over the same GPUs that
    attention splits tp x attention_dp: when both are recorded and the MoE split is used
    (not 1 x 1, a dense model's), the two products must agree."""
    if p.moe_tensor_parallel is None or p.expert_parallel is None:
        return
    moe = p.moe_tensor_parallel * p.expert_parallel
    attn = p.tensor_parallel * (p.attention_data_parallel or 1)
    if moe != 1 and moe != attn:
        raise InputError(
            f"{where}: {prefix}moe_tp_size x {prefix}moe_ep_size = {p.moe_tensor_parallel} x "
            f"{p.expert_parallel} = {moe} contradicts {prefix}tp_size x "
            f"{prefix}attention_dp_size = {p.tensor_parallel} x "
            f"{p.attention_data_parallel or 1} = {attn} (both split one replica's GPUs, so "
            f"they must be equal)"
        )
