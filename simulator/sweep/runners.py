"""Run sweep points: local worker processes or Ray tasks, streaming records as they finish.

Both backends run `evaluate_point` on each task and hand every record to a callback in the
parent (which stores it durably) as soon as it is ready; neither writes files from a worker.
A point that the engine refuses (the model does not fit, TP does not divide the heads) comes
back `dropped` with its reason; a point that crashes comes back `error` with the exception,
and the sweep goes on.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from simulator.cost import LayoutError, MemoryFitError
from simulator.errors import InputError
from simulator.model.architecture import ModelError
from simulator.sweep.store import Record, make_record

RAY_INSTALL_HINT = (
    "the ray backend needs Ray: pip install 'frontier-sim[ray]' (or pip install 'ray[default]')"
)


@dataclass(frozen=True)
class Task:
    key: str
    values: dict[str, Any]
    scenario: dict[str, Any]
    skip_bad_rows: bool = False  # trace rows the engine cannot take: dropped and counted


Evaluate = Callable[[Task], Record]
REFUSALS = (InputError, ModelError, LayoutError, MemoryFitError)
OnRecord = Callable[[Record], None]


def refusal_reason(exc: BaseException) -> str:
    """The category under which a refused point is counted."""
    if isinstance(exc, MemoryFitError):
        return "model does not fit in GPU memory"
    if isinstance(exc, LayoutError):
        return "parallel layout does not split the model"
    if isinstance(exc, ModelError):
        return "model cannot be loaded"
    text = str(exc)
    loc = text.split(": ")[0] if ": " in text else ""
    return f"refused by the engine ({loc})" if loc else "refused by the engine"


def evaluate_point(task: Task) -> Record:
    """Load and simulate one point; never raises for a bad point (the record says why)."""
    import simulator
    from simulator.api import LoadedScenario
    from simulator.inputs.scenario import load_scenario_file

    t0 = time.perf_counter()
    try:
        # The engine is built (and the deployment checked) once, inside simulate().
        scenario, _ = load_scenario_file(task.scenario)
        result = simulator.simulate(LoadedScenario(scenario, None),
                                    skip_bad_rows=task.skip_bad_rows).to_dict()
    except REFUSALS as exc:  # the schema or the engine refuses the point
        return make_record(task.key, task.values, "dropped", reason=refusal_reason(exc),
                           error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                           wall_s=time.perf_counter() - t0)
    except Exception as exc:  # a crash of the simulator: recorded, and the sweep goes on
        return make_record(task.key, task.values, "error", error=_describe_crash(exc),
                           wall_s=time.perf_counter() - t0)
    return make_record(task.key, task.values, "ok", result=result,
                       wall_s=time.perf_counter() - t0)


def _describe_crash(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    msg = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {msg}{where}"


def _crash_record(task: Task, exc: BaseException) -> Record:
    return make_record(task.key, task.values, "error", error=_describe_crash(exc))


def run_local(tasks: Sequence[Task], workers: int, on_record: OnRecord,
              evaluate: Evaluate = evaluate_point) -> None:
    """Run tasks on a pool of `workers` processes; records reach `on_record` as they finish."""
    if not tasks:
        return
    workers = max(1, min(workers, len(tasks)))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        # Keep a bounded window in flight so a huge sweep does not queue every task at once.
        window = workers * 4
        it = iter(tasks)
        pending: dict[Future[Record], Task] = {}

        def top_up() -> None:
            while len(pending) < window:
                task = next(it, None)
                if task is None:
                    return
                pending[pool.submit(evaluate, task)] = task

        top_up()
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                task = pending.pop(fut)
                try:
                    rec = fut.result()
                except Exception as exc:  # the worker process died (BrokenProcessPool)
                    rec = _crash_record(task, exc)
                on_record(rec)
            try:
                top_up()
            except RuntimeError:  # the pool broke: record what is left as crashed
                for task in it:
                    on_record(_crash_record(task, RuntimeError("worker pool broken")))


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def run_ray(tasks: Sequence[Task], workers: int, on_record: OnRecord, address: str | None,
            evaluate: Evaluate = evaluate_point) -> None:
    """The same points as Ray tasks, on the cluster at `address` (or RAY_ADDRESS) or on a
    local instance with `workers` CPUs; results stream back into `on_record`."""
    try:
        import ray
    except ImportError:
        raise RayMissingError(RAY_INSTALL_HINT) from None
    import logging

    address = address or os.environ.get("RAY_ADDRESS") or None
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, logging_level=logging.WARNING)
        else:
            ray.init(num_cpus=max(1, workers), include_dashboard=False,
                     logging_level=logging.WARNING)
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(evaluate)
        pending = {remote.remote(t): t for t in tasks}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    rec = ray.get(ref)
                except Exception as exc:  # the task or its worker died
                    rec = _crash_record(task, exc)
                on_record(rec)
    finally:
        if started:
            ray.shutdown()


class RayMissingError(InputError):
    """`--backend ray` without Ray installed."""
