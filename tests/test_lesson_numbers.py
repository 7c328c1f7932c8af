"""The number check behind every lesson page (simulator/lessons/numbers.py), on hand-made
sentences and rows whose arithmetic is shown."""

from __future__ import annotations

import pytest

from simulator.lessons.numbers import PageData, printed_numbers, unexplained

ROWS = [  # two configs of one sweep, SI units as results.csv holds them
    {"point_id": "a", "tpot_s.p50": 0.0065, "output_tokens_per_s_per_gpu": 153.0,
     "workload.arrival.concurrency": 1},
    {"point_id": "b", "tpot_s.p50": 0.0089, "output_tokens_per_s_per_gpu": 4673.0,
     "workload.arrival.concurrency": 256},
]


def test_names_and_ranges_are_not_numbers() -> None:
    text = ("B200 NVFP4 + EAGLE-3 on TP8, 2P2D, Llama-3.1-70B, 3000-5000 in, "
            "`frontier explain x --decode-batch 129`")
    assert printed_numbers(text) == [printed_numbers("3000")[0]]  # the range's first end only


def test_printed_forms() -> None:
    # 2,399 is 2399 to the nearest unit; 0.65M is 650,000 to the nearest 5,000; -0.21 to 0.005
    (a,), (b,), (c,) = (printed_numbers(t) for t in ("2,399 ms", "0.65M tokens", "-0.21 %"))
    assert (a.value, a.half_unit) == (2399.0, 0.5)
    assert (b.value, b.half_unit) == pytest.approx((650_000.0, 5_000.0))
    assert (c.value, c.half_unit) == pytest.approx((-0.21, 0.005))


def test_values_of_the_rows_pass_in_their_printed_units() -> None:
    data = PageData(ROWS)
    # 0.0065 s = 6.5 ms; 4673 tokens/s; 4673 / 153 = 30.54 -> 30.5×; 8.9 / 6.5 = 1.369 -> 1.4×
    ok = ("TPOT grows from 6.5 to 8.9 ms while tokens/s per GPU grow 30.5× (153 → 4673), "
          "TPOT 1.4× at 256 in flight.")
    assert unexplained([ok], data) == []


@pytest.mark.parametrize("bad", [
    "TPOT is 7.5 ms at batch 1.",  # no row has 7.5 ms
    "Tokens/s per GPU grow 25.0× from batch 1 to 256.",  # 4673 / 153 is 30.5, not 25
    "TPOT 6.5 ms is 0.0065 s.",  # an SI value printed as seconds at 4 decimals is fine...
])
def test_a_number_no_row_gives_is_caught(bad: str) -> None:
    found = unexplained([bad], PageData(ROWS))
    if "0.0065 s" in bad:
        assert found == []  # ...and the control passes
    else:
        assert found, bad


def test_a_unit_is_read_from_the_number_it_runs_to() -> None:
    # "from 6.5 to 8.9 ms": 6.5 is read as ms (6.5e-3 s is in the rows); as a bare number
    # it would need a cell of 6.5, which no row has
    assert unexplained(["TPOT goes from 6.5 to 8.9 ms."], PageData(ROWS)) == []
    assert unexplained(["TPOT goes from 6.5 to 8.9 ms."], PageData(ROWS[1:]))[0][0] == "6.5"


def test_counts_worked_out_in_the_sentence() -> None:
    # 209,890 / 4,208 = 49.88 -> 49 whole requests fit; of 64 users 64 - 49 = 15 wait
    text = "209,890 / 4,208 = 49 requests fit, so of 64 users 15 wait."
    data = PageData([{"kv_capacity_tokens": 209_890, "concurrency": 64}], [4208])
    assert unexplained([text], data) == []
    assert unexplained([text.replace("15 wait", "17 wait")], data)[0][0] == "17"


def test_figures_the_analysis_computed_count_as_data() -> None:
    text = "At 537 output tokens/s per GPU each user reads 136 tokens/s."
    assert unexplained([text], PageData(ROWS))  # interpolated: in no row
    assert unexplained([text], PageData(ROWS, [537.2, 135.8])) == []
