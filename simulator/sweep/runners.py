"""Run sweep points: local worker processes or Ray tasks, streaming records as they finish.

Both backends run `evaluate_point` on each task and hand every record to a callback in the
parent (which stores it durably) as soon as it is ready; neither writes files from a worker.
A point that the engine refuses (the model does not fit, TP does not divide the heads) comes
back `dropped` with its reason; a point that crashes comes back `error` with the exception,
and the sweep goes on. A worker process that dies (killed, as the out-of-memory killer does)
breaks the local pool: the points it had in flight come back `error` (`--resume` retries
them) and the rest run on a fresh pool, so no point is ever left without a record. A worker
whose parent dies exits on its own (`_watch_parent`) instead of living on as an orphan.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

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
    # Calibrated GPU profiles standing in for shipped ones by name (a calibration overlay's:
    # calibration/applied.py); None: the shipped profiles.
    profiles: Mapping[str, Any] | None = None


Evaluate = Callable[[Task], Record]
T = TypeVar("T")  # a unit of work the generic runners take (sweep Task, measured run, ...)
R = TypeVar("R")  # what evaluating it gives
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
                                    skip_bad_rows=task.skip_bad_rows,
                                    profiles=task.profiles).to_dict()
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


WORKER_DIED = "worker process died (killed, e.g. by the out-of-memory killer)"
_PARENT_POLL_S = 0.5


def _watch_parent() -> None:
    """Pool initializer: end this worker when the process that started it is gone (killed by
    SIGKILL or SIGTERM, it cannot shut its pool down), instead of living on as an orphan."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="frontier-parent-watch", daemon=True).start()


def run_local(tasks: Sequence[Task], workers: int, on_record: OnRecord,
              evaluate: Evaluate = evaluate_point) -> None:
    """Run tasks on a pool of `workers` processes; records reach `on_record` as they finish,
    one per task whatever happens to the workers."""
    run_items_local(tasks, workers, on_record, evaluate, _crash_record)


def run_items_local(items: Sequence[T], workers: int, on_result: Callable[[R], None],
                    evaluate: Callable[[T], R], crashed: Callable[[T, BaseException], R]
                    ) -> None:
    """`run_local` for any picklable work: `evaluate` each item on `workers` processes, and
    `crashed` stands in for the result of an item whose worker died or whose result failed."""
    if not items:
        return
    workers = max(1, min(workers, len(items)))
    queue = deque(items)
    while queue:
        if not _run_pool(queue, workers, on_result, evaluate, crashed) and queue:
            # A pool that broke before giving any record: count the next point as crashed,
            # so a point that kills every worker at once cannot stall the sweep.
            on_result(crashed(queue.popleft(), RuntimeError(WORKER_DIED)))


def _run_pool(queue: deque[T], workers: int, on_record: Callable[[R], None],
              evaluate: Callable[[T], R], crashed: Callable[[T, BaseException], R]) -> int:
    """Run tasks from `queue` on one pool until it is empty or the pool breaks (the tasks in
    flight are then recorded as crashed; the rest stay queued). Returns the records given."""
    given = 0
    with ProcessPoolExecutor(max_workers=workers, initializer=_watch_parent) as pool:
        window = workers * 4  # a bounded window in flight: a huge sweep is not queued at once
        pending: dict[Future[R], T] = {}
        broken = False
        while True:
            while not broken and queue and len(pending) < window:
                task = queue.popleft()
                try:
                    pending[pool.submit(evaluate, task)] = task
                except BrokenExecutor:  # a worker died: this task waits for a fresh pool
                    queue.appendleft(task)
                    broken = True
            if not pending:
                return given
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                task = pending.pop(fut)
                try:
                    rec = fut.result()
                except BrokenExecutor:
                    broken = True
                    rec = crashed(task, RuntimeError(WORKER_DIED))
                except Exception as exc:  # e.g. a result that cannot be pickled back
                    rec = crashed(task, exc)
                on_record(rec)
                given += 1


def require_ray(backend: str) -> None:
    """Refuse `--backend ray` in one line where Ray is not installed."""
    if backend == "ray" and not ray_available():
        raise RayMissingError(RAY_INSTALL_HINT)


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
    run_items_ray(tasks, workers, on_record, address, evaluate, _crash_record)


def run_items_ray(items: Sequence[T], workers: int, on_result: Callable[[R], None],
                  address: str | None, evaluate: Callable[[T], R],
                  crashed: Callable[[T, BaseException], R]) -> None:
    """`run_ray` for any picklable work, as `run_items_local` is for the local pool."""
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
        pending = {remote.remote(t): t for t in items}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    rec = ray.get(ref)
                except Exception as exc:  # the task or its worker died
                    rec = crashed(task, exc)
                on_result(rec)
    finally:
        if started:
            ray.shutdown()


class RayMissingError(InputError):
    """`--backend ray` without Ray installed."""
