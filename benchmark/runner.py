"""Run a matrix: every run in a fresh worker process, on a local process pool or on Ray.

Results go to one folder per run under the results directory (see `benchmark.runs`), next to
matrix.json, the expanded spec the directory belongs to. Running the same spec again skips the
runs whose record is finished and valid and re-runs failed or interrupted ones; a different spec
is refused, and so is a run folder holding a record of another budget (a run extended outside the
matrix). A run whose worker raises or dies is retried up to `retries` times (an online run
starts over, a collect run resumes from its committed iteration); if it still fails, the reason
is in its error.txt and the other runs go on. A run whose VLM refused its key or model is not
retried, and the runs waiting to ask the same model are not started (each says so in its
error.txt): fix the key or model and run the same command again. Records are only ever written
by an atomic rename, so killing the matrix at any point loses no finished run and leaves no
half-written record.
Ctrl-C (or SIGTERM) stops the runs in flight and marks each interrupted in its error.txt, which
`gameon bench report` shows, then says what finished, what was interrupted and how to resume; a
further Ctrl-C meanwhile only says that it is stopping.

The Ray runner uses the cluster at RAY_ADDRESS (or `ray_address`), else starts a local one with
`workers` CPUs bound to 127.0.0.1. Its workers run the same worker process in the run folders, so
on a multi-node cluster the results directory must be on a filesystem every node shares. A run
lost with its node is retried like a crashed one (on the nodes left); if the head stops answering
for HEAD_LOST_SECONDS, the runs in flight are stopped and ClusterLost ends the matrix, which the
same command resumes once the cluster is back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import glob
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.markup import escape

from gameon.atomic import atomic_write, defer_signals, file_lock
from gameon.benchmark.matrix import MatrixSpec, RunSpec, expand, run_config, spec_dict
from gameon.benchmark.runs import (
    ATTEMPT_VARIABLE,
    ERROR_FILE,
    FAULT_VARIABLE,
    LOG_FILE,
    REFUSED_STATUS,
    RUN_FILE,
    failure_reason,
    is_complete,
    mark_interrupted,
    own_record,
    prepare,
    record_difference,
    write_error,
)
from gameon.records import RECORD_FILE
from gameon.text import plural

MATRIX_FILE = "matrix.json"
LOCK_FILE = ".bench.lock"
RUNNERS = ("local", "ray")
POLL_SECONDS = 0.2
LOG_TAIL_LINES = 30
HEAD_CHECK_SECONDS = 2.0
"""How often the Ray runner checks that the cluster's head still answers."""
HEAD_LOST_SECONDS = 10.0
"""How long the head may not answer before the matrix gives the cluster up."""
RUN_FOLDER_FILES = (RECORD_FILE, "state.json", RUN_FILE)
"""Files of one run's folder (a bench run's or `gameon experiment`'s), not of a results folder."""
STOP_SECONDS = 10.0
"""How long the runs in flight of a stopped matrix may take to end before they are killed."""
STILL_STOPPING = (
    "gameon bench run: already stopping: the runs in flight are ended and marked interrupted "
    f"(up to {STOP_SECONDS:.0f} s), then it says what finished and how to resume\n"
)
"""What a Ctrl-C (or SIGTERM) arriving while the matrix stops says, instead of cutting it short."""

STARTUP_SECONDS = 4.5
"""A worker process's start (interpreter, torch, env) and its record, on an idle 2-core machine."""
EPISODE_SECONDS = 0.2
"""One collected or evaluated episode of up to 400 control steps."""
STEP_SECONDS = {"ppo": 1 / 650, "sac": 1 / 70}
"""One online env step with its share of the learner's updates (results/baselines)."""
UPDATE_SECONDS = {"bc": 1 / 200, "iql": 1 / 52}
"""One gradient update of a collect run's offline learner, two runs side by side (bc: 190-210
updates/s in results/paper_v2_rerun; iql: results/baselines)."""
MATRIX_SECONDS = 10.0
"""Once per matrix: checking the spec and writing the report."""
MEASURED_ON, MEASURED_WORKERS = "an idle 2-core machine", 2
"""Where the costs above were measured, and with how many runs at once: the smoke preset took
2 min 0 s there."""


@dataclass
class RunnerOptions:
    """How to run a matrix: which runner, how many runs at once, how often to retry."""

    runner: Literal["local", "ray"] = "local"
    workers: int | None = None
    """runs at once; None: os.cpu_count() (ray with an address: the cluster's CPUs)"""
    retries: int = 1
    """extra attempts of a run whose worker raised or died"""
    ray_address: str | None = None
    """Ray cluster to use; None: RAY_ADDRESS, else a local cluster"""
    only: str | None = None
    """run only the runs whose id contains this substring"""

    def validate(self) -> None:
        """Raise ValueError naming the bad option and what it accepts."""
        if self.runner not in RUNNERS:
            raise ValueError(f"unknown runner {self.runner!r}; accepted: {', '.join(RUNNERS)}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")


class ClusterLost(RuntimeError):
    """The Ray cluster's head stopped answering: the matrix cannot go on, a rerun resumes it."""

    def __init__(self, address: str, seconds: float) -> None:
        super().__init__(
            f"lost the Ray cluster at {address} (its head has not answered for {seconds:.0f} s); "
            "the runs in flight were stopped, finished runs are kept: restart the cluster and "
            "run the same command again to resume"
        )


@dataclass
class RunResult:
    """How one run of the matrix ended in this invocation."""

    run_id: str
    status: Literal["done", "skipped", "failed"]
    """done: ran now; skipped: finished before; failed: see error"""
    attempts: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass
class MatrixResult:
    """What one `run_matrix` call did."""

    results_dir: Path
    results: list[RunResult] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def retried(self) -> int:
        """Attempts that failed and were tried again (a lost node's run counts here)."""
        return sum(max(r.attempts - 1, 0) for r in self.results)

    @property
    def ok(self) -> bool:
        """No run failed."""
        return self.count("failed") == 0


# -- how long a matrix takes ----------------------------------------------------------------------


def run_seconds(run: RunSpec) -> float:
    """Expected seconds of one run on an idle machine, from its budget and the costs above."""
    from gameon.envs import ENV_SKILLS

    budget = run.budget
    if run.protocol == "online":
        steps = budget["total_timesteps"]
        if run.learner == "ppo":
            from gameon.baselines.ppo import planned_env_steps

            steps = planned_env_steps(run_config(run))
        every = budget.get("eval_every", 0)
        evaluations = -(-steps // every) if every else 1
        skills = len(ENV_SKILLS[run.env_id][0])
        episodes = evaluations * run.eval_episodes_per_skill * skills
        work = steps * STEP_SECONDS.get(run.learner, STEP_SECONDS["sac"])
        return STARTUP_SECONDS + work + episodes * EPISODE_SECONDS
    run_values = {"eval_episodes_per_skill": run.eval_episodes_per_skill, "env_id": run.env_id}
    return collect_seconds({**_loop_values(run), **run_values, "learner": run.learner})


def collect_seconds(values: dict[str, Any], done: int | None = None) -> float:
    """Expected seconds of a collect run (`values`: LoopConfig's fields) on an idle machine;
    `done`: the last iteration a resumed run committed (None: a new run)."""
    from gameon.envs import ENV_SKILLS

    iterations, per_iteration = values["iterations"], values["episodes_per_iteration"]
    if done is None:  # iteration 0 trains on the seed episodes, each later one collects more
        trained, collected = iterations + 1, values["seed_episodes"] + iterations * per_iteration
    else:
        trained = max(iterations - done, 0)
        collected = trained * per_iteration
    eval_env = values["eval_env_id"] or values["practice_env_id"]
    evaluated = trained * values["eval_episodes_per_skill"] * len(ENV_SKILLS[eval_env][0])
    targets = [values["env_id"], *([values["report_env_id"]] if values["report_env_id"] else [])]
    final = sum(2 * values["target_eval_episodes"] * len(ENV_SKILLS[t][0]) for t in targets)
    update_seconds = UPDATE_SECONDS.get(values["learner"], UPDATE_SECONDS["iql"])
    work = trained * values["num_updates"] * update_seconds
    return STARTUP_SECONDS + work + (collected + evaluated + final) * EPISODE_SECONDS


def _loop_values(run: RunSpec) -> dict[str, Any]:
    """A collect run's budget and settings over LoopConfig's defaults."""
    from gameon.experimenter.loop import LoopConfig

    defaults = {f.name: f.default for f in dataclasses.fields(LoopConfig)}
    return {**defaults, **run.settings, **run.budget}


def schedule_seconds(durations: list[float], workers: int) -> float:
    """When the last of these runs ends if each starts, in order, as soon as a worker is free."""
    free = [0.0] * max(1, workers)
    for duration in durations:
        index = free.index(min(free))
        free[index] += duration
    return max(free)


def matrix_seconds(runs: list[RunSpec], workers: int) -> float:
    """Expected seconds of a whole matrix on an idle machine with `workers` runs at once."""
    return MATRIX_SECONDS + schedule_seconds([run_seconds(run) for run in runs], workers)


def load_average() -> float:
    """The 1-minute load average (0 where the system does not say)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def load_factor(load: float, workers: int, cpus: int) -> float:
    """How many times slower than idle the runs should go: the load plus the workers over the
    CPUs, at least 1."""
    return max(1.0, (load + workers) / max(1, cpus))


def duration_text(seconds: float) -> str:
    """A duration for a person: "3 s", "44 s", "2 min", "1.5 h"; to the second below 90 s, so that
    a matrix's total never reads shorter than one of its runs' ("done ... (12 s)")."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60):.0f} min"
    return f"{seconds / 3600:.1f} h"


def plan_line(
    spec: MatrixSpec, results_dir: Path, options: RunnerOptions, load: float | None = None
) -> str:
    """What `gameon bench run` is about to do and how long it should take, idle and at the
    current load (`load`: the load average; None: measure it)."""
    runs = select_runs(spec, options.only)
    todo = [run for run in runs if not is_complete(run, Path(results_dir) / run.run_id)]
    head = f"{spec.name}: {plural(len(todo), 'run')} to do"
    if len(todo) < len(runs):
        head += f" ({len(runs) - len(todo)} of {len(runs)} finished before)"
    if not todo:
        return f"{head}: nothing to run"
    cpus = os.cpu_count() or 1
    workers = options.workers or cpus
    reference = duration_text(matrix_seconds(todo, MEASURED_WORKERS))
    at_once = f"{workers} at a time"
    if options.runner == "ray" and options.workers is None and ray_address(options.ray_address):
        at_once = "as many at a time as the Ray cluster has CPUs"
    line = f"{head}, {at_once}: about {reference} on {MEASURED_ON}"
    if options.runner == "ray":
        return f"{line}; on Ray, as fast as its workers"
    load = load_average() if load is None else load
    factor = load_factor(load, workers, cpus)
    here = duration_text(matrix_seconds(todo, workers) * factor)
    if factor < 1.2 and here == reference:
        return f"{line}, longer when it is busy"
    return f"{line}; here, now (load {load:.1f} on {cpus} CPUs): about {here}"


def vlm_lines(spec: MatrixSpec, results_dir: Path, options: RunnerOptions) -> list[str]:
    """How many model calls the runs still to do will make and what they should cost, for the
    runs that ask a paid backend (gemini, openai); none otherwise (see experimenter.vlm.estimate).
    """
    from gameon.benchmark.matrix import run_config
    from gameon.experimenter.vlm.estimate import collect_estimate, estimate_lines, online_estimate

    estimates = []
    for run in select_runs(spec, options.only):
        if run.curriculum.name != "vlm" or is_complete(run, Path(results_dir) / run.run_id):
            continue
        config = run_config(run)
        estimate = collect_estimate if run.protocol == "collect" else online_estimate
        estimates.append(estimate(config))
    return estimate_lines(estimates)


# -- the results directory ----------------------------------------------------------------------


def open_results_dir(results_dir: Path) -> None:
    """Create the results directory and its lock file if missing; ValueError naming the folder if
    it is a file or cannot be created or written, before anything runs."""
    accepted = "give --results a folder you can write to (it is created if missing)"
    if results_dir.exists() and not results_dir.is_dir():
        raise ValueError(f"the results folder {results_dir} is a file, not a folder; {accepted}")
    held = [name for name in RUN_FOLDER_FILES if (results_dir / name).is_file()]
    if held:
        raise ValueError(
            f"{results_dir} is one run's folder (it holds {held[0]}), not a results folder: give "
            "--results a folder of its own, which holds a folder per run (e.g. "
            f"{results_dir.parent / 'bench'})"
        )
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        (results_dir / LOCK_FILE).touch()
    except OSError as error:
        raise ValueError(
            f"cannot use {results_dir} as the results folder: {error.strerror or error}; {accepted}"
        ) from None


def check_matrix_file(spec: MatrixSpec, results_dir: Path) -> None:
    """Refuse (ValueError) a results directory holding another matrix's results (its matrix.json,
    or a run's record of another budget); write nothing."""
    wanted = spec_dict(spec)
    path = results_dir / MATRIX_FILE
    if path.is_file():
        try:
            existing = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path} is not JSON ({error}); move it away or use another dir"
            ) from None
        if not _is_matrix(existing):
            raise ValueError(f"{path} is not a matrix; move it away or use another dir")
        difference = matrix_difference(existing, wanted)
        if difference:
            raise ValueError(
                f"{results_dir} holds the results of another matrix "
                f"({existing.get('name')!r}, {len(existing.get('runs', []))} runs): {difference}. "
                "Run that spec again to resume it, or give another --results directory."
            )
    check_run_records(spec, results_dir)


def check_run_records(spec: MatrixSpec, results_dir: Path) -> None:
    """Refuse (ValueError) a results directory where a run's folder holds a record of that run id
    made otherwise (e.g. extended by `gameon experiment --iterations`): it is not this matrix's
    run finished, so it may be neither skipped (the report would pool it with the others) nor
    run again (which would remove the record or fail on the longer run's state)."""
    differing = []
    for run in expand(spec):
        record = own_record(run, results_dir / run.run_id)
        difference = None if record is None else record_difference(run, record)
        if difference is not None:
            differing.append((run, difference))
    if differing:
        run, difference = differing[0]
        more = f" ({len(differing) - 1} more runs likewise)" if len(differing) > 1 else ""
        raise ValueError(
            f"{results_dir / run.run_id} holds a record of {run.run_id} that is not this "
            f"matrix's run ({difference}){more}, made outside it (e.g. extended by `gameon "
            "experiment`): it is neither skipped as finished nor run over. Move that run folder "
            f"out of {results_dir} to run the run here, or give another --results directory."
        )


def write_matrix_file(spec: MatrixSpec, results_dir: Path) -> None:
    """Write matrix.json atomically, or refuse if the directory holds another matrix's results."""
    check_matrix_file(spec, results_dir)
    atomic_write(results_dir / MATRIX_FILE, json.dumps(spec_dict(spec), indent=1) + "\n")


def _is_matrix(data: Any) -> bool:
    """Whether matrix.json's data has a matrix's shape (a hand-edited one may not)."""
    if not isinstance(data, dict):
        return False
    runs, files = data.get("runs", []), data.get("input_files", {})
    return (
        isinstance(runs, list)
        and all(isinstance(run, dict) and isinstance(run.get("run_id"), str) for run in runs)
        and isinstance(files, dict)
    )


def matrix_difference(existing: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """A one-line description of how two expanded matrices differ, or None if they do not. A
    matrix.json is compared on the input files it names (none, if written before they were
    kept; hand stages only, if before coded skills and transcripts were)."""
    old = {r["run_id"]: r for r in existing.get("runs", [])}
    new = {r["run_id"]: r for r in wanted["runs"]}
    if existing.get("format") != wanted["format"]:
        return f"format {existing.get('format')!r} is not {wanted['format']!r}"
    only_old, only_new = sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())
    if only_old or only_new:
        first = (only_new or only_old)[0]
        side = "is new" if only_new else "is not in this spec"
        return f"{len(only_old) + len(only_new)} run ids differ, e.g. {first} {side}"
    changed = sorted(i for i in new if old[i] != new[i])
    if changed:
        keys = [k for k in new[changed[0]] if new[changed[0]][k] != old[changed[0]].get(k)]
        return f"{len(changed)} runs have other settings, e.g. {changed[0]} ({', '.join(keys)})"
    files, now = existing.get("input_files") or {}, wanted["input_files"]
    changed_files = [path for path in sorted(files) if files[path] != now.get(path)]
    if changed_files:  # a file matrix.json does not name was not tracked when it was written
        path = changed_files[0]
        state = "cannot be read now" if now.get(path) is None else "has changed"
        return (
            f"the file {path} {state} since these results were made (another input of their "
            "runs: stages, coded skills or a transcript)"
        )
    return None


@contextlib.contextmanager
def results_lock(results_dir: Path) -> Iterator[int]:
    """Hold the results directory for this invocation; ValueError if another one holds it or it
    cannot be used (see `open_results_dir`).

    Yields the lock's file descriptor: local workers inherit it, so workers orphaned by a killed
    matrix keep the directory locked until they end, and a rerun cannot clean a folder under them.
    """
    open_results_dir(results_dir)
    with contextlib.ExitStack() as stack:
        try:
            lock_fd = stack.enter_context(file_lock(results_dir / LOCK_FILE, timeout=0))
        except TimeoutError:
            raise ValueError(
                f"another `gameon bench run` (or a worker it left running) is using {results_dir}"
            ) from None
        yield lock_fd


# -- worker processes ---------------------------------------------------------------------------


def worker_environment(attempt: int, fault: str | None = None) -> dict[str, str]:
    """The environment of a worker process: single-threaded maths, the attempt number."""
    env = dict(os.environ)
    env.update(
        {
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            ATTEMPT_VARIABLE: str(attempt),
        }
    )
    if fault is not None:
        env[FAULT_VARIABLE] = fault
    return env


def start_worker(
    run_dir: Path, attempt: int, fault: str | None = None, lock_fd: int | None = None
) -> subprocess.Popen:
    """Start `python -m gameon.benchmark.runs RUN_DIR`, its output appended to run.log."""
    with open(Path(run_dir) / LOG_FILE, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "gameon.benchmark.runs", str(run_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=worker_environment(attempt, fault),
            pass_fds=() if lock_fd is None else (lock_fd,),
        )


def run_worker(run_dir: str, attempt: int, fault: str | None = None) -> int:
    """Run one worker process to the end and return its exit status (the Ray task's body)."""
    process = start_worker(Path(run_dir), attempt, fault)
    try:
        return process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


class LocalLauncher:
    """Runs each attempt as a child process of this one."""

    def __init__(self, workers: int | None, lock_fd: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.lock_fd = lock_fd
        self.description = f"local process pool, {self.workers} workers"
        self.on_this_machine = True
        """whether the runs share this machine's CPUs, so that its load slows them"""

    def start(self, run_dir: Path, attempt: int) -> subprocess.Popen:
        return start_worker(run_dir, attempt, lock_fd=self.lock_fd)

    def poll(self, handle: subprocess.Popen) -> tuple[int, str] | None:
        """None while running, else (exit status, what happened if it was not a clean exit)."""
        status = handle.poll()
        return None if status is None else (status, "")

    def check(self) -> None:
        """Nothing to check: the workers are this process's children."""

    def check_after_failure(self) -> None:
        """Nothing to check: a failed attempt here is the run's own."""

    def stop(self, handles: list[subprocess.Popen]) -> None:
        """SIGTERM every worker still running, then SIGKILL those not ended STOP_SECONDS later."""
        running = [handle for handle in handles if handle.poll() is None]
        for handle in running:
            handle.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for handle in running:
            try:
                handle.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                handle.kill()
                handle.wait()

    def close(self) -> None:
        pass


def ray_address(address: str | None) -> str | None:
    """The Ray cluster to use: `address`, else RAY_ADDRESS; None: start a local one."""
    return address or os.environ.get("RAY_ADDRESS") or None


class RayLauncher:
    """Runs each attempt as a Ray task (one CPU, a fresh worker process, no Ray-level retry)."""

    def __init__(self, workers: int | None, address: str | None) -> None:
        try:
            import ray
        except ImportError:
            raise ValueError("--runner ray needs Ray: pip install 'gameon-rl[ray]'") from None
        self.ray = ray
        address = ray_address(address)
        self.on_this_machine = not address
        """whether the runs share this machine's CPUs (a local cluster), so that its load slows
        them"""
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if address:
            check_ray_head(address)
            try:
                ray.init(address=address, log_to_driver=False)
            except ConnectionError as error:  # e.g. "auto" with no cluster, a token refused
                reason = str(error).strip().splitlines()[0] if str(error).strip() else error
                raise ValueError(f"cannot join the Ray cluster at {address}: {reason}") from None
            cpus = int(ray.cluster_resources().get("CPU", 1))
            self.workers = workers or cpus
            self.description = f"Ray cluster at {address}, {self.workers} runs at once"
        else:
            self.workers = workers or os.cpu_count() or 1
            ray.init(
                address="local",  # a new cluster, never one a stale /tmp/ray file points at
                num_cpus=self.workers,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                _node_ip_address="127.0.0.1",
            )
            self.description = f"local Ray cluster (127.0.0.1), {self.workers} CPUs"
        self.task = ray.remote(num_cpus=1, max_retries=0, max_calls=1)(run_worker)
        self.fault = os.environ.get(FAULT_VARIABLE)
        self.head = None if str(address).startswith("ray://") else context_head(ray)
        """the head's GCS address, checked while the matrix runs (not through a Ray client)"""
        self.checked = time.monotonic()
        self.unanswered_since: float | None = None

    def start(self, run_dir: Path, attempt: int) -> Any:
        return self.task.remote(str(Path(run_dir).resolve()), attempt, self.fault)

    def poll(self, handle: Any) -> tuple[int, str] | None:
        ready, _ = self.ray.wait([handle], timeout=0)
        if not ready:
            return None
        try:
            return self.ray.get(handle), ""
        except self.ray.exceptions.NodeDiedError as error:
            return -1, f"lost with the Ray node it ran on (NodeDiedError)\n{error}"
        except Exception as error:  # noqa: BLE001  (a lost Ray worker: retried)
            return -1, f"Ray task failed: {type(error).__name__}: {error}"

    def check(self) -> None:
        """Raise ClusterLost once the head has not answered for HEAD_LOST_SECONDS: the cluster
        cannot go on without it, yet Ray does not tell the driver."""
        now = time.monotonic()
        if self.head is None or now - self.checked < HEAD_CHECK_SECONDS:
            return
        self.checked = now
        if head_answers(self.head):
            self.unanswered_since = None
            return
        self.unanswered_since = self.unanswered_since or now
        if now - self.unanswered_since >= HEAD_LOST_SECONDS:
            raise ClusterLost(self.head, now - self.unanswered_since)

    def check_after_failure(self) -> None:
        """Before a failed attempt is judged: raise ClusterLost if the head does not answer for
        HEAD_LOST_SECONDS, since the attempt then failed with the cluster, not on its own (else
        losing the head could end the matrix as failed runs instead of saying so)."""
        if self.head is None:
            return
        silent_since = time.monotonic()
        while not head_answers(self.head):
            if time.monotonic() - silent_since >= HEAD_LOST_SECONDS:
                raise ClusterLost(self.head, time.monotonic() - silent_since)
            time.sleep(HEAD_CHECK_SECONDS)

    def stop(self, handles: list[Any]) -> None:
        for handle in handles:
            with contextlib.suppress(Exception):
                self.ray.cancel(handle, force=True)

    def close(self) -> None:
        self.ray.shutdown()


def context_head(ray: Any) -> str:
    """The "host:port" of the head (its GCS) of the cluster this driver is connected to."""
    return ray.get_runtime_context().gcs_address


def head_answers(address: str) -> bool:
    """Whether the Ray head (its GCS, "host:port") accepts a connection."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=HEAD_CHECK_SECONDS).close()
    except OSError:
        return False
    return True


def check_ray_head(address: str) -> None:
    """Refuse a Ray address ("host:port") where no head answers, at once: `ray.init` would retry
    it for about 14 minutes before failing. "auto" and "ray://" client addresses are left to it."""
    if address == "auto" or "://" in address or ":" not in address:
        return
    if not head_answers(address):
        raise ValueError(
            f"no Ray head answers at {address} (RAY_ADDRESS or --ray-address): start it "
            "(`ray start --head`) or check the address; without an address --runner ray starts "
            "a local cluster"
        )


def make_launcher(
    options: RunnerOptions, lock_fd: int | None = None
) -> LocalLauncher | RayLauncher:
    """The launcher of the chosen runner."""
    if options.runner == "ray":
        return RayLauncher(options.workers, options.ray_address)
    return LocalLauncher(options.workers, lock_fd)


# -- the scheduler ------------------------------------------------------------------------------


@dataclass
class _Active:
    run: RunSpec
    attempt: int
    handle: Any
    started: float
    errors: list[str]


def failure_message(run_dir: Path, status: int, note: str) -> str:
    """Why an attempt failed, headline first: the worker's error.txt, else its exit status and
    the tail of its log."""
    error_file = run_dir / ERROR_FILE
    if error_file.is_file():
        text = error_file.read_text(errors="replace").strip()
        return f"{failure_reason(text)}\n{text}"
    if status < 0:
        reason = f"worker process killed by signal {-status}"
        with contextlib.suppress(ValueError):
            reason = f"worker process killed by {signal.Signals(-status).name}"
    elif status == 0:
        reason = "worker process exited 0 but left no finished, valid record"
    else:
        reason = f"worker process exited with status {status}"
    lines = []
    with contextlib.suppress(OSError):
        lines = (run_dir / LOG_FILE).read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    parts = (note or reason, reason if note else "", "last lines of run.log:", *lines)
    return "\n".join(part for part in parts if part)


def select_runs(spec: MatrixSpec, only: str | None) -> list[RunSpec]:
    """The matrix's runs, or those whose id contains `only`, or, where it holds a glob's `*`, `?`
    or `[`, whose whole id it matches (`*__s1`: seed 1, where `s1` also picks s10 and s11)."""
    runs = every = expand(spec)
    if only:
        if glob.has_magic(only):
            runs = [r for r in runs if fnmatch.fnmatchcase(r.run_id, only)]
            missing = f"matches {only!r} (a glob matches whole run ids)"
        else:
            runs = [r for r in runs if only in r.run_id]
            missing = f"contains {only!r}"
        if not runs:
            example = every[0].run_id
            raise ValueError(
                f"no run id of matrix {spec.name!r} {missing}; ids look like {example}"
            )
    return runs


def run_matrix(
    spec: MatrixSpec,
    results_dir: Path,
    options: RunnerOptions | None = None,
    console: Any = None,
) -> MatrixResult:
    """Run every unfinished run of the matrix (see the module docstring); return what happened."""
    from rich.console import Console

    options = options or RunnerOptions()
    options.validate()
    console = console or Console(soft_wrap=True)
    results_dir = Path(results_dir)
    runs = select_runs(spec, options.only)
    outcome = MatrixResult(results_dir)
    with results_lock(results_dir) as lock_fd:
        write_matrix_file(spec, results_dir)
        todo = []
        for run in runs:
            if is_complete(run, results_dir / run.run_id):
                outcome.results.append(RunResult(run.run_id, "skipped"))
            else:
                todo.append(run)
        finished = outcome.count("skipped")
        if finished:
            console.print(
                f"{plural(finished, 'run')} already finished in {results_dir}: skipped",
                markup=False,
            )
        if todo:
            _schedule(todo, results_dir, options, console, outcome, lock_fd)
    return outcome


class MatrixProgress:
    """The matrix's progress counted in expected idle seconds of work, so a long run weighs more
    than a short one: what the progress bar fills and its time left are computed from."""

    def __init__(self, runs: list[RunSpec], workers: int, factor: float = 1.0) -> None:
        self.expected = {run.run_id: run_seconds(run) for run in runs}
        self.kinds = {run.run_id: (run.protocol, run.learner) for run in runs}
        self.total = sum(self.expected.values())
        self.workers = workers
        self.factor = factor
        """wall seconds per expected second of all runs: from the load at first (1 on a Ray
        cluster elsewhere), then as runs finish"""
        self.finished: dict[str, float] = {}
        self.measured: dict[str, float] = {}
        self.failed: set[str] = set()

    def finish(self, run_id: str, seconds: float, failed: bool = False) -> None:
        """Count a run as ended after `seconds`; a failed one does not set the pace."""
        self.finished[run_id] = seconds
        if failed:
            self.failed.add(run_id)
            return
        self.measured[run_id] = seconds
        self.factor = self._ratio(list(self.measured))

    def pace(self, run_id: str) -> float:
        """Wall seconds per expected second of this run: as measured on the ended runs of its
        kind (protocol and learner), whose estimates err alike, else on all ended runs."""
        same = [r for r in self.measured if self.kinds[r] == self.kinds[run_id]]
        return self._ratio(same) if same else self.factor

    def _ratio(self, run_ids: list[str]) -> float:
        expected = sum(self.expected[r] for r in run_ids)
        return max(0.1, sum(self.measured[r] for r in run_ids) / expected)

    def completed(self, running: dict[str, float]) -> float:
        """Expected seconds of work done: ended runs whole, running ones (run id: seconds so far)
        by their time at their pace, at most 95% of them until they end."""
        done = sum(self.expected[r] for r in self.finished)
        return done + sum(
            min(elapsed / self.pace(r), 0.95 * self.expected[r]) for r, elapsed in running.items()
        )

    def seconds_left(self, running: dict[str, float]) -> float:
        """Wall seconds until the last run ends, the runs left going at their pace."""
        left = [max(self.expected[r] * self.pace(r) - t, 0.0) for r, t in running.items()]
        left += [
            self.expected[r] * self.pace(r)
            for r in self.expected
            if r not in self.finished and r not in running
        ]
        return schedule_seconds(left, self.workers)

    def line(self, running: dict[str, float]) -> str:
        """One line for a log: "3/20 runs finished (1 failed), ~2 min left"."""
        text = f"{len(self.finished)}/{len(self.expected)} runs finished"
        if self.failed:
            text += f" ({len(self.failed)} failed)"
        if len(self.finished) == len(self.expected):
            return text
        return f"{text}, ~{duration_text(self.seconds_left(running))} left"


def progress_bar(console: Any, redirect_stdout: bool) -> Any:
    """rich's progress bar over the matrix: work done, runs finished and failed, elapsed, time left
    and the runs in flight."""
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Column

    in_flight = Column(ratio=1, no_wrap=True, overflow="ellipsis")
    return Progress(
        TextColumn("[bold]runs"),
        BarColumn(bar_width=24),
        TextColumn("{task.fields[finished]}/{task.fields[runs]}"),
        TextColumn("failed {task.fields[failed]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[running]}", table_column=in_flight),
        console=console,
        redirect_stdout=redirect_stdout,
        speed_estimate_period=120,
        expand=True,
    )


def _schedule(
    todo: list[RunSpec],
    results_dir: Path,
    options: RunnerOptions,
    console: Any,
    outcome: MatrixResult,
    lock_fd: int,
) -> None:
    """Run the runs on the launcher; show a progress bar on stderr when it is a terminal, else
    a line per ended run (how many have finished and failed, the time left)."""
    from rich.console import Console

    launcher = make_launcher(options, lock_fd)
    console.print(f"running {plural(len(todo), 'run')} on the {launcher.description}", markup=False)
    pending: deque[tuple[RunSpec, int, list[str]]] = deque((run, 1, []) for run in todo)
    active: list[_Active] = []
    factor = 1.0
    if launcher.on_this_machine:
        factor = load_factor(load_average(), launcher.workers, os.cpu_count() or 1)
    tracker = MatrixProgress(todo, launcher.workers, factor)
    stderr = Console(stderr=True)
    bar = progress_bar(stderr, console.is_terminal) if stderr.is_terminal else None
    stop_once = StopOnce()
    previous = {
        signum: signal.signal(signum, stop_once)
        for signum in (signal.SIGINT, signal.SIGTERM)
        if signal.getsignal(signum) not in (signal.SIG_IGN, None)  # None: not Python's to restore
    }
    try:
        with bar or contextlib.nullcontext():
            task = None
            if bar is not None:
                fields = {"finished": 0, "runs": len(todo), "failed": 0, "running": ""}
                task = bar.add_task("runs", total=tracker.total, **fields)
            while pending or active:
                while pending and len(active) < launcher.workers:
                    with defer_signals():  # a run is always pending or active, never neither
                        run, attempt, errors = pending.popleft()
                        run_dir = results_dir / run.run_id
                        try:
                            prepare(run, run_dir)
                            handle = launcher.start(run_dir, attempt)
                        except BaseException:  # a full disk: pending again, to be counted
                            pending.appendleft((run, attempt, errors))
                            raise
                        active.append(_Active(run, attempt, handle, time.monotonic(), errors))
                for item in list(active):
                    polled = launcher.poll(item.handle)
                    if polled is None:
                        continue
                    if polled[0] != 0:
                        launcher.check_after_failure()
                    with defer_signals():  # active, then pending again or counted: never lost
                        active.remove(item)
                        try:
                            result = _finish(item, polled, results_dir, options, pending, console)
                        except BaseException:  # its error.txt unwritable: counted as stopped
                            pending.appendleft((item.run, item.attempt, item.errors))
                            raise
                        ended = [] if result is None else [result]
                        if polled[0] == REFUSED_STATUS:
                            ended += _skip_refused(item.run, results_dir, pending, console)
                        for run_result in ended:
                            outcome.results.append(run_result)
                            failed = run_result.status == "failed"
                            tracker.finish(run_result.run_id, run_result.seconds, failed)
                    if result is not None and bar is None:
                        print(tracker.line(_running(active)), file=sys.stderr, flush=True)
                launcher.check()
                if bar is not None:
                    bar.update(
                        task,
                        completed=tracker.completed(_running(active)),
                        finished=len(tracker.finished),
                        failed=outcome.count("failed"),
                        running=", ".join(item.run.run_id for item in active),
                    )
                time.sleep(POLL_SECONDS)
    except BaseException as stop:  # Ctrl-C, SIGTERM, a lost cluster: stop the runs, say so
        stop_once.stopping = True
        cause = stop_cause(stop)
        interrupted = stop_runs(launcher, active, pending, results_dir, cause, outcome)
        not_started = sum(1 for _, _, errors in pending if not errors)
        for line in stopped_lines(outcome, interrupted, not_started, cause, results_dir):
            console.print(line, markup=False)
        raise
    finally:
        launcher.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class StopOnce:
    """The SIGINT and SIGTERM handler while a matrix runs: the first signal stops it
    (KeyboardInterrupt, or SystemExit(128 + signum) for SIGTERM); one arriving once it is
    stopping (a second Ctrl-C, a signal to the whole process group) only says so on stderr, so
    that every run in flight is still ended and marked and the summary printed."""

    def __init__(self) -> None:
        self.stopping = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.stopping:
            os.write(2, STILL_STOPPING.encode())  # no buffered stream: it may be mid-write
            return
        self.stopping = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)


def stop_cause(stop: BaseException) -> str:
    """What stopped the matrix, in a few words: "Ctrl-C", "SIGTERM", "the lost Ray cluster"."""
    if isinstance(stop, KeyboardInterrupt):
        return "Ctrl-C"
    if isinstance(stop, ClusterLost):
        return "the lost Ray cluster"
    if isinstance(stop, SystemExit) and isinstance(stop.code, int) and stop.code > 128:
        with contextlib.suppress(ValueError):
            return signal.Signals(stop.code - 128).name  # raised by StopOnce
    return f"{type(stop).__name__} in the runner"


def stop_runs(
    launcher: LocalLauncher | RayLauncher,
    active: list[_Active],
    pending: deque[tuple[RunSpec, int, list[str]]],
    results_dir: Path,
    cause: str,
    outcome: MatrixResult,
) -> list[str]:
    """Stop the runs in flight as the matrix ends early and mark each one, and each failed run
    waiting for its retry, interrupted in its error.txt (`mark_interrupted`), so that `gameon
    bench report` says "interrupted" rather than "no record"; return their ids. A run whose
    record was written meanwhile, not yet seen to end, is counted done in `outcome`; an error.txt
    a worker wrote is kept above."""
    launcher.stop([item.handle for item in active])
    interrupted = []
    for item in active:
        run_dir = results_dir / item.run.run_id
        if is_complete(item.run, run_dir):
            seconds = time.monotonic() - item.started
            outcome.results.append(RunResult(item.run.run_id, "done", item.attempt, seconds))
            continue
        why = f"{item.run.run_id} interrupted: {cause} stopped the bench run while it ran"
        _mark(run_dir, why)
        interrupted.append(item.run.run_id)
    for run, attempt, errors in pending:
        if errors:  # a failed attempt waits for its retry: its folder holds that attempt's files
            why = f"{run.run_id} interrupted: {cause} stopped the bench run before retry {attempt}"
            _mark(results_dir / run.run_id, why)
            interrupted.append(run.run_id)
    return interrupted


def _mark(run_dir: Path, why: str) -> None:
    """`mark_interrupted`, best effort: a results folder that cannot be written (a lost shared
    filesystem) must not hide what stopped the matrix; the report then says "no record"."""
    with contextlib.suppress(OSError):
        mark_interrupted(run_dir, why)


def stopped_lines(
    outcome: MatrixResult, interrupted: list[str], not_started: int, cause: str, results_dir: Path
) -> list[str]:
    """What a matrix stopped early says: what finished, failed and was interrupted (and where each
    says why), how many runs did not start, and how to resume."""
    done, before, failed = (outcome.count(status) for status in ("done", "skipped", "failed"))
    lines = [
        f"stopped by {cause}: {plural(done, 'run')} done now, {before} finished before, "
        f"{failed} failed, {len(interrupted)} interrupted, {not_started} not started"
    ]
    stopped = [("failed", r.run_id) for r in outcome.results if r.status == "failed"]
    for status, run_id in [*stopped, *(("interrupted", run_id) for run_id in interrupted)]:
        lines.append(f"  {status}: {run_id} (see {results_dir / run_id / ERROR_FILE})")
    lines.append(
        f"to resume, run the same `gameon bench run` again: it keeps and skips the {done + before} "
        "finished runs and runs the others (an online run starts over, a collect run resumes from "
        f"its last committed iteration); records so far: {results_dir}/<run_id>/record.json"
    )
    return lines


def _running(active: list[_Active]) -> dict[str, float]:
    now = time.monotonic()
    return {item.run.run_id: now - item.started for item in active}


def _finish(
    item: _Active,
    polled: tuple[int, str],
    results_dir: Path,
    options: RunnerOptions,
    pending: deque,
    console: Any,
) -> RunResult | None:
    """Judge a finished attempt: a result, or None when the run is queued for another attempt."""
    status, note = polled
    run_dir = results_dir / item.run.run_id
    seconds = time.monotonic() - item.started
    if status == 0 and is_complete(item.run, run_dir):
        console.print(f"[green]done[/green] {item.run.run_id} ({seconds:.0f} s)")
        return RunResult(item.run.run_id, "done", item.attempt, seconds)
    message = failure_message(run_dir, status, note)
    errors = [*item.errors, f"attempt {item.attempt}: {message}"]
    if item.attempt <= options.retries and status != REFUSED_STATUS:
        console.print(
            f"[yellow]retrying[/yellow] {item.run.run_id}: {escape(_first_line(message))}"
        )
        pending.appendleft((item.run, item.attempt + 1, errors))
        return None
    attempts = plural(item.attempt, "attempt")
    if status == REFUSED_STATUS and item.attempt <= options.retries:
        attempts += " (its model refused it: another attempt would be refused too)"
    verdict = f"failed after {attempts}, the last with:\n{_first_line(message)}"
    write_error(run_dir, "\n\n".join([*errors, verdict]))  # the reason last: failure_reason
    console.print(
        f"[red]failed[/red] {item.run.run_id} after {attempts}: "
        f"{escape(_first_line(message))} (see {escape(str(run_dir / ERROR_FILE))})"
    )
    return RunResult(item.run.run_id, "failed", item.attempt, seconds, "\n\n".join(errors))


def _skip_refused(
    refused: RunSpec, results_dir: Path, pending: deque, console: Any
) -> list[RunResult]:
    """Take the runs that would ask the model which refused `refused` (the same curriculum and
    options) off the queue, each failed with a note in its error.txt whose last line is the
    refusal: they would each spend their first iteration only to be refused too."""
    reason = failure_reason((results_dir / refused.run_id / ERROR_FILE).read_text(errors="replace"))
    skipped = [entry for entry in pending if entry[0].curriculum == refused.curriculum]
    for entry in skipped:
        pending.remove(entry)
        run, _, errors = entry
        note = (
            f"{run.run_id} not started: {refused.run_id}'s model refused it, and this run would "
            f"ask the same model; fix that and run the same `gameon bench run` again\n{reason}"
        )
        write_error(results_dir / run.run_id, "\n\n".join([*errors, note]))
    if skipped:
        console.print(
            f"[red]not starting[/red] {len(skipped)} more {escape(refused.curriculum.label)} "
            f"run{'s' if len(skipped) > 1 else ''} ({', '.join(e[0].run_id for e in skipped)}): "
            "their model refused the one above"
        )
    return [RunResult(run.run_id, "failed", attempt - 1) for run, attempt, _ in skipped]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no reason given"
