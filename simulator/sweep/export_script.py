"""The shell script of `frontier export`, assembled so that no value can change what it runs.

Values reach the script from the user: swept strings, a scenario's name, a model's path, the
sweep folder's name. Every string of a point's scenario and every comment's text has its
control characters escaped (`\\n` as the two characters backslash and n), so a value can never
end a comment line or a heredoc and start a command of its own; every argument of a command is
quoted with `shlex.quote` (simulator/sweep/launch_flags.py `_join`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.sweep.capacity import at_rate
from simulator.sweep.export import bench_command, launch_commands, with_copies
from simulator.sweep.recommend import describe
from simulator.sweep.store import point_scenario
from simulator.sweep.table import Row, number

# Every character a shell or a terminal may take as the end of a line, or that a terminal
# interprets (C0 controls with tab, DEL, C1 controls, the Unicode line/paragraph separators).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_FACTS = (("output_tokens_per_s_per_gpu", "tok/s per GPU"),
          ("output_tokens_per_s_per_user.p50", "tok/s per user"),
          ("ttft_s.p99", "s TTFT p99"), ("tpot_s.p99", "s TPOT p99"))


def script_text(text: str) -> str:
    """`text` with every control character shown escaped: it stays on one script line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def script_safe(value: Any) -> Any:
    """A scenario (any nesting of mappings and lists) with every string made `script_text`."""
    if isinstance(value, str):
        return script_text(value)
    if isinstance(value, Mapping):
        return {script_safe(k): script_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [script_safe(v) for v in value]
    return value


def comment(text: str) -> str:
    return f"# {script_text(text)}"


def export_script(sweep_dir: Path, chosen: Sequence[Row], axes: Sequence[str], engine: str,
                  how: str, copies: Mapping[str, int], rate: float | None) -> str:
    """The script: per chosen row, a comment block, the engine launch, then the bench load."""
    out = [f"#!/usr/bin/env bash\n{comment(f'frontier export: top {len(chosen)} of {sweep_dir}')}"
           f" for {engine} ({script_text(how)})\n"
           "# Each block: launch the engine, then replay the simulated load."]
    for i, row in enumerate(chosen, start=1):
        point_id = str(row["point_id"])
        loaded = point_scenario(sweep_dir, point_id)
        if loaded is None:
            raise InputError(f"{sweep_dir / 'points'}: missing {point_id}.yaml")
        scenario: dict[str, Any] = script_safe(loaded)
        facts = [f"{v:.4g} {label}" for col, label in _FACTS
                 if (v := number(row, col)) is not None]
        out.append(f"\n{comment(f'{i}. {describe(row, axes)}')}\n"
                   f"{comment('   predicted: ' + ', '.join(facts))}\n"
                   f"{comment('   scenario: ' + str(sweep_dir / 'points' / (point_id + '.yaml')))}")
        n = copies.get(point_id, 1)
        if n > 1:
            out.append(f"#    {n} copies of this point's deployment (recommend's sizing)")
            scenario = with_copies(scenario, n)
        if rate is not None:
            scenario = at_rate(scenario, rate)
        out.extend(launch_commands(scenario, engine))
        out.append("# load (run once the server is up):")
        out.extend(bench_command(scenario, engine))
    return "\n".join(out) + "\n"
