"""The numbers a lesson page prints, and whether each one comes from the page's data.

A page's sentences are filled in from its sweep rows and the table of figures its analysis
computed; a printed number that matches neither, nor a ratio, change or difference of two of
them, nor arithmetic on two other numbers of the same sentence, is a number the page invented
or misprinted (the defect of "55.23 → 55.23 ms" beside a chart of 96 against 85 ms).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# A number standing on its own: not part of a name (B200, TP8, 2P2D, EAGLE-3, 3.1-70B, 1000-2000
# as a range's second end), with thousands commas, an exponent, and an M or k multiplier.
_NUMBER = re.compile(
    r"(?<![\w.\-/^])(?P<sign>[-−]?)(?P<digits>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?"
    r"(?P<exp>[eE][-+]?\d+)?(?P<mult>[Mk])?(?![\w]|\.\d)")
_CODE = re.compile(r"`[^`]*`")  # commands in backticks are checked by running them
_MULT = {"M": 1e6, "k": 1e3, None: 1.0}


@dataclass(frozen=True, slots=True)
class Printed:
    """One number as a sentence prints it: its value and half a unit of its last digit."""

    text: str
    value: float
    half_unit: float


def printed_numbers(sentence: str) -> list[Printed]:
    """Every stand-alone number of a sentence, commands in backticks left out."""
    out = []
    for m in _NUMBER.finditer(_CODE.sub(" ", sentence)):
        frac = m.group("frac") or ""
        mult = _MULT[m.group("mult")]
        exp = float(f"1{m.group('exp')}") if m.group("exp") else 1.0
        body = m.group("digits").replace(",", "") + frac
        value = float(body) * exp * mult * (-1.0 if m.group("sign") else 1.0)
        decimals = len(frac) - 1 if frac else 0
        out.append(Printed(m.group(0), value, 0.5 * 10.0 ** -decimals * exp * mult))
    return out


def numeric_leaves(value: Any) -> Iterable[float]:
    """Numbers in a cell, a mapping or a list (a JSON text cell included)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            yield float(value)
    elif isinstance(value, str):
        try:
            parsed = float(value)
        except ValueError:
            if value[:1] in "{[":
                try:
                    yield from numeric_leaves(json.loads(value))
                except ValueError:
                    return
            return
        if math.isfinite(parsed):
            yield parsed
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from numeric_leaves(v)
    elif isinstance(value, Sequence):
        for v in value:
            yield from numeric_leaves(v)


_UNIT = (  # what follows (or, for ×, precedes) a number, and the quantity it names
    (re.compile(r"\s?(ms|milliseconds?)\b"), "time", 1e3),
    (re.compile(r"\s?(us|µs|microseconds?)\b"), "time", 1e6),
    (re.compile(r"\s?(s|seconds?)\b(?!/)"), "time", 1.0),
    (re.compile(r"\s?%"), "pct", 100.0),
    (re.compile(r"×"), "ratio", 1.0),
    (re.compile(r"\s?(output |good |input )?(tokens|requests)/s"), "rate", 1.0),
    (re.compile(r"\s?(output |input )?tokens\b(?!/)"), "tokens", 1.0),
)


def unit_of(sentence: str, start: int, end: int) -> tuple[str, float]:
    """The quantity a printed number names, read from the words beside it, and the scale from
    a row's SI value to it ('bare', 1.0 when nothing says)."""
    if sentence[max(0, start - 1):start] == "×":
        return "ratio", 1.0
    after = sentence[end:end + 24]
    for pattern, kind, scale in _UNIT:
        if pattern.match(after):
            return kind, scale
    return "bare", 1.0


def _family(column: str) -> set[str]:
    """The quantities a result column can be printed as."""
    name = column.lower()
    out = {"bare"}
    if re.search(r"_s(\.|_p\d+$|$)", name):
        out.add("time")
    if "per_s" in name:
        out.add("rate")
    if "tokens" in name or "length" in name:  # acceptance length: tokens per verify step
        out.add("tokens")
    if any(w in name for w in ("pct", "share", "fraction", "attainment", "rate")):
        out.add("pct")
    if any(w in name for w in ("ratio", "speedup", "length", "factor")):
        out.add("ratio")
    return out


def _ratios(a: float, b: float, kind: str) -> list[float]:
    """What a sentence derives from two values of one quantity: a factor (×), or a share and a
    change in percent."""
    if b == 0:
        return []
    r = a / b
    return [r] if kind == "ratio" else [100.0 * r, 100.0 * (r - 1.0)] if kind == "pct" else []


@dataclass(frozen=True, slots=True)
class Number:
    printed: Printed
    kind: str
    scale: float


# A quotient of two rounded numbers is off by at most the sum of their relative half units (to
# first order); the check allows this many times that, for rounding on both sides of the sum.
ROUNDING_MARGIN = 2.5
# Operands printed coarser than this (relative half unit, summed) give no factor or percent.
COARSE = 0.04
_JOIN = re.compile(r"\s*(to|→|against|and)\s*$")


def _numbers(sentence: str) -> list[Number]:
    """The sentence's numbers with their quantities; in "2,399 to 4,797 ms" the first takes the
    unit of the second."""
    text = _CODE.sub(lambda m: " " * len(m.group(0)), sentence)
    found = list(_NUMBER.finditer(text))
    out = [Number(printed_numbers(m.group(0))[0], *unit_of(text, m.start(), m.end()))
           for m in found]
    for i in range(len(out) - 2, -1, -1):
        if out[i].kind == "bare" and out[i + 1].kind != "bare" and _JOIN.match(
                text[found[i].end():found[i + 1].start()]):
            out[i] = Number(out[i].printed, out[i + 1].kind, out[i + 1].scale)
    return out


# Words that name a result column: a factor in a sentence that names one is a factor of it.
_NAMED = (("TPOT", "tpot_s"), ("TTFT", "ttft_s"), ("per GPU", "per_gpu"),
          ("per user", "per_user"), ("good requests", "goodput"), ("queue", "queue_s"))


class PageData:
    """The values a page may print: its rows' cells by column (each column printable as the
    quantities its name says) and the figures its analysis computed (printable as any)."""

    def __init__(self, rows: Sequence[Mapping[str, Any]], figures: Iterable[float] = ()):
        columns: dict[str, set[float]] = {}
        for r in rows:
            for k, v in r.items():
                columns.setdefault(k, set()).update(numeric_leaves(v))
        self.figures = sorted(set(numeric_leaves(list(figures))))
        self.columns = {k: sorted(v) for k, v in columns.items() if v}
        self._by_kind: dict[str, list[str]] = {}
        for k in self.columns:
            for kind in _family(k):
                self._by_kind.setdefault(kind, []).append(k)

    def _values(self, kind: str) -> Iterable[float]:
        for k in self._by_kind.get(kind, []):
            yield from self.columns[k]

    def direct(self, n: Number) -> bool:
        p = n.printed
        tol = p.half_unit * (1 + 1e-9) + 1e-12 * abs(p.value)
        scales = (n.scale, 1.0)  # a column may already be in the printed unit (delta_pct)
        return any(abs(v * s - p.value) <= tol for v in [*self.figures, *self._values(n.kind)]
                   for s in scales)

    def from_one_column(self, n: Number, sentence: str = "") -> bool:
        """A factor or a percent between two values of one column (the same metric of two
        configs; of a metric the sentence names, where it names one), or of two of the
        analysis's figures."""
        if n.kind not in ("ratio", "pct"):
            return False
        p = n.printed
        tol = p.half_unit * (1 + 1e-9)
        metrics = {k for kind in ("time", "rate", "tokens") for k in self._by_kind.get(kind, [])}
        named = [part for word, part in _NAMED if word in sentence]
        if named:
            metrics = {k for k in metrics if any(part in k for part in named)}
        groups = [*(self.columns[k] for k in sorted(metrics) if len(self.columns[k]) <= 400),
                  self.figures]
        for vs in groups:
            for a, b in itertools.permutations(vs, 2):
                if any(abs(c - p.value) <= tol for c in _ratios(a, b, n.kind)):
                    return True
        return False


def _from_sentence(n: Number, others: Sequence[Number]) -> bool:
    """Arithmetic on two other numbers of the same sentence, within their printed rounding: a
    factor or a percent from two of one quantity, a count (a difference, how many fit) from two
    bare numbers."""
    p = n.printed
    for a, b in itertools.permutations(others, 2):
        if a.kind != b.kind or (n.kind not in ("ratio", "pct") and a.kind != n.kind):
            continue
        av, bv = a.printed.value, b.printed.value
        rel = sum(q.printed.half_unit / abs(q.printed.value) if q.printed.value else 1.0
                  for q in (a, b))
        if rel > COARSE and n.kind != "bare":  # a factor of "1" and "3" says little
            continue
        slack = p.half_unit + abs(p.value) * rel * ROUNDING_MARGIN
        if n.kind == "bare":
            cands = [av - bv, *([math.floor(av / bv), math.ceil(av / bv)] if bv else [])]
        else:
            cands = _ratios(av, bv, n.kind)
        if any(abs(c - p.value) <= slack for c in cands):
            return True
    return False


def unexplained(sentences: Iterable[str], data: PageData) -> list[tuple[str, str]]:
    """(number as printed, sentence) for each printed number the page's data does not give."""
    out = []
    for sentence in sentences:
        nums = _numbers(sentence)
        for i, n in enumerate(nums):
            if data.direct(n):
                continue
            others = [q for j, q in enumerate(nums) if j != i]
            if _from_sentence(n, others) or data.from_one_column(n, sentence):
                continue
            out.append((n.printed.text, sentence))
    return out
