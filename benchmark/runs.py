"""One run of the matrix, start to record: `execute(run, run_dir) -> RunRecord`.

The online protocol trains PPO or SAC in-process (`train(Args(...))`, torch on one thread) and
turns its summary into a run record; the collect protocol runs the Game On loop
(`experimenter.loop.run_experiment`), which returns the record and resumes from its own
state.json. Either way the record is written atomically to run_dir/record.json, next to the
learner's own files (summary, evaluations, checkpoint, TensorBoard logs, curves, transcripts).

The runners start every run in a fresh interpreter with `python -m gameon.benchmark.runs RUN_DIR`
(the run is read from RUN_DIR/run.json; stdout and stderr go to RUN_DIR/run.log): exit status 0
means the record is written, anything else that the run failed (3: its VLM refused the key or
model, which another attempt cannot mend; 130: it was interrupted by Ctrl-C), with the reason in
error.txt: its last line, `failure_reason`. A worker the runner stops
(Ctrl-C or SIGTERM on the whole bench run, a lost Ray cluster) is marked interrupted by the runner
(`mark_interrupted`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gameon.atomic import atomic_write, out_of_space_line
from gameon.benchmark.matrix import BUDGET_KEYS, RunSpec, curriculum_fields, run_config
from gameon.envs import ENV_SKILLS
from gameon.experimenter.vlm.backend import VLMRefused
from gameon.records import (
    RECORD_FILE,
    CurvePoint,
    EpisodeOutcome,
    Evaluation,
    RunRecord,
    Training,
    VLMUsage,
    build_record,
    load_record,
    write_record,
)

RUN_FILE = "run.json"
LOG_FILE = "run.log"
ERROR_FILE = "error.txt"
FAULT_VARIABLE = "GAMEON_BENCH_FAULT"
"""Fault injection for tests: "crash:SUBSTRING" or "raise:SUBSTRING" makes the first attempt of
every run whose id contains SUBSTRING die by SIGKILL or raise; later attempts run normally."""
ATTEMPT_VARIABLE = "GAMEON_BENCH_ATTEMPT"
REFUSED_STATUS = 3
"""The worker's exit status when the run's VLM refused its key or model (`VLMRefused`): the runner
does not retry it, nor start the other runs that would ask the same model."""
INTERRUPTED = "KeyboardInterrupt"
"""The reason (last line) of the error.txt of a run stopped by Ctrl-C, or by the runner as its bench
run stopped: interrupted, not failed."""


def execute(run: RunSpec, run_dir: Path) -> RunRecord:
    """Run one cell of the matrix in `run_dir` and write its validated record there."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if run.protocol == "collect":
        return run_collect(run, run_dir)  # the loop writes its own record
    record = run_online(run, run_dir)
    write_record(run_dir / RECORD_FILE, record)
    return record


def run_online(run: RunSpec, run_dir: Path) -> RunRecord:
    """Train PPO or SAC in this process and convert its summary into a run record."""
    import importlib

    import torch

    torch.set_num_threads(1)
    learner = importlib.import_module(f"gameon.baselines.{run.learner}")
    args = run_config(run, run_dir)
    start = time.perf_counter()
    summary = learner.train(args)
    wall = time.perf_counter() - start
    return online_record(run, args, summary, wall, run_dir)


def online_record(
    run: RunSpec, args: Any, summary: dict, wall_seconds: float, run_dir: Path
) -> RunRecord:
    """The run record of an online learner's summary (see baselines.ppo.train)."""
    from gameon.baselines.common import training_env_options
    from gameon.evaluation import SUITE_SEED
    from gameon.experimenter.vlm.backend import TRANSCRIPT_FILE

    transcript = run_dir / TRANSCRIPT_FILE
    return build_record(
        run_dir=run_dir,
        run_id=run.run_id,
        protocol="online",
        curriculum=run.curriculum.name,
        curriculum_label=summary["curriculum_label"],
        learner=run.learner,
        env_id=run.env_id,
        target_skills=ENV_SKILLS[run.env_id][0],
        seed=run.seed,
        budget={key: int(getattr(args, key)) for key in BUDGET_KEYS["online"]},
        curve_unit="env_steps",
        curve=[
            CurvePoint(
                step=p["global_step"], success_rate=p["success_rate"], per_skill=p["per_skill"]
            )
            for p in summary["evals"]
        ],
        evaluation=Evaluation(
            env_id=run.env_id,
            suite_seed=SUITE_SEED,
            episodes_per_skill=run.eval_episodes_per_skill,
            episodes=[EpisodeOutcome(**e) for e in summary["eval"]["episodes"]],
        ),
        vlm=VLMUsage(**summary["vlm"]),
        wall_seconds=wall_seconds,
        env_steps=summary["global_step"],
        steps_per_second=summary["sps"],
        checkpoint=Path(summary["checkpoint"]),
        training=Training(
            config=asdict(args),
            env_kwargs=training_env_options(args),
            transcript=transcript.name if transcript.is_file() else None,
        ),
        extra={
            "settings": run.settings,
            "train_seconds": summary.get("train_seconds"),
            "eval_seconds": summary.get("eval_seconds"),
            "train_episodes": summary.get("train_episodes"),
            "train_per_skill": summary.get("train_per_skill"),
            "curriculum_state": summary.get("curriculum_state"),
        },
    )


def run_collect(run: RunSpec, run_dir: Path) -> RunRecord:
    """Run (or resume) the collect loop in `run_dir` (named after the run); return its record."""
    import torch

    from gameon.experimenter.loop import run_experiment

    torch.set_num_threads(1)
    return run_experiment(run_config(run), run_dir, progress=False)


# -- run folders --------------------------------------------------------------------------------


def is_complete(run: RunSpec, run_dir: Path) -> bool:
    """Whether the run folder holds this run's finished, valid record (the collect loop writes
    its record only once the run is finished) made as the run asks: its run.json, and a record of
    its budget (not one extended in the folder by `gameon experiment --iterations`)."""
    record = own_record(run, run_dir)
    if record is None or record_difference(run, record) is not None:
        return False
    return read_run(run_dir) == run


def own_record(run: RunSpec, run_dir: Path) -> RunRecord | None:
    """The valid record of this run's id in its folder, else None."""
    try:
        record = load_record(Path(run_dir) / RECORD_FILE)
    except ValueError:
        return None
    return record if record.run_id == run.run_id else None


def run_budget(run: RunSpec) -> dict[str, int]:
    """Every budget key of the run as it trains with it, as its record states it: read from the
    config the run trains with (the spec's budget over the learner's or the loop's defaults)."""
    config = run_config(run)
    return {key: int(getattr(config, key)) for key in BUDGET_KEYS[run.protocol]}


def record_difference(run: RunSpec, record: RunRecord) -> str | None:
    """How a record of this run's id differs from the run (what it is and its budget), e.g.
    "iterations 3, not 2"; None if it does not. Such a record is another matrix's, or a run
    changed outside the matrix: not this run finished, and pooled with it would mislead."""
    wanted = {
        "protocol": run.protocol,
        "curriculum": run.curriculum.name,
        "learner": run.learner,
        "env_id": run.env_id,
        "seed": run.seed,
        **run_budget(run),
    }
    found = {
        "protocol": record.protocol,
        "curriculum": record.curriculum,
        "learner": record.learner,
        "env_id": record.env_id,
        "seed": record.seed,
        **record.budget,
    }
    differ = [
        f"{key} {found.get(key)}, not {value}"
        for key, value in wanted.items()
        if found.get(key) != value
    ]
    return ", ".join(differ + _settings_difference(run, record)) or None


def _settings_difference(run: RunSpec, record: RunRecord) -> list[str]:
    """The settings the matrix gives this run (and its curriculum's options) that the record's
    training config holds otherwise, e.g. "reward_mode 'dense', not 'sparse'"."""
    if record.training is None:
        return []
    config = json.loads(json.dumps(dataclasses.asdict(run_config(run)), default=str))
    chosen = {*run.settings, *curriculum_fields(run, set(config))}
    recorded = record.training.config
    return [
        f"{key} {recorded[key]!r}, not {config[key]!r}"
        for key in sorted(chosen)
        if key in recorded and key in config and recorded[key] != config[key]
    ]


def prepare(run: RunSpec, run_dir: Path) -> None:
    """Make the folder ready for a (re)start: an online run starts over in a folder emptied but for
    its log (its learner refuses a folder holding a run's files, `check_new_run_dir` in
    baselines.common), a collect run keeps its committed state to resume from (the loop removes
    what it did not commit); run.json describes the run."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if run.protocol == "online":
        for entry in run_dir.iterdir():
            if entry.name == LOG_FILE:
                continue
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (run_dir / ERROR_FILE).unlink(missing_ok=True)
    (run_dir / RECORD_FILE).unlink(missing_ok=True)  # a record of another run.json's run
    atomic_write(run_dir / RUN_FILE, json.dumps(run.to_dict(), indent=1) + "\n")


def read_run(run_dir: Path) -> RunSpec | None:
    """The RunSpec saved in a run folder, or None if there is none or it is unreadable."""
    try:
        return RunSpec.from_dict(json.loads((Path(run_dir) / RUN_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_error(run_dir: Path, message: str) -> None:
    """Record why a run failed in run_dir/error.txt (never a record); its last line says why."""
    atomic_write(Path(run_dir) / ERROR_FILE, message.rstrip() + "\n")


def failure_reason(error_text: str) -> str:
    """Why a run has no record, from its error.txt: the last non-empty line (the exception line of
    the worker's traceback, or the last attempt's reason, which the runner writes last)."""
    lines = [line.strip() for line in error_text.splitlines() if line.strip()]
    return lines[-1] if lines else "no reason given"


def was_interrupted(error_text: str) -> bool:
    """Whether the error.txt is that of a run stopped before its end (Ctrl-C, or its bench run was
    stopped), not failed: a rerun runs it again."""
    return failure_reason(error_text) == INTERRUPTED


def mark_interrupted(run_dir: Path, why: str) -> None:
    """Record in run_dir/error.txt that the run was stopped from outside (`why`: one line naming the
    run and what stopped it), its last line INTERRUPTED, so that the report says "interrupted"
    rather than "no record". The runner calls this for the runs it stops when the whole bench run
    ends early, since a worker it terminates cannot say so itself. What error.txt held is kept
    above (a failed attempt's traceback); one that says interrupted already is left as it is."""
    error_file = Path(run_dir) / ERROR_FILE
    earlier = error_file.read_text(errors="replace").strip() if error_file.is_file() else ""
    if was_interrupted(earlier):
        return
    write_error(run_dir, "\n\n".join(part for part in (earlier, f"{why}\n{INTERRUPTED}") if part))


# -- the worker process -------------------------------------------------------------------------


def _inject_fault(run: RunSpec) -> None:
    fault = os.environ.get(FAULT_VARIABLE, "")
    kind, _, pattern = fault.partition(":")
    if not pattern or pattern not in run.run_id or os.environ.get(ATTEMPT_VARIABLE, "1") != "1":
        return
    if kind == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "raise":
        raise RuntimeError(f"injected failure ({FAULT_VARIABLE}={fault})")


def _interrupted(error: BaseException | None) -> bool:
    """Whether Ctrl-C stopped the worker: a KeyboardInterrupt, or an error raised while one
    unwound (a library's cleanup failing on the way out)."""
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__context__
    return False


def main(argv: list[str] | None = None) -> int:
    """Worker entry point: execute the run described in RUN_DIR/run.json."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m gameon.benchmark.runs RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    run = read_run(run_dir)
    if run is None:
        write_error(run_dir, f"no readable {RUN_FILE} in {run_dir}")
        return 2
    print(f"== {run.run_id} (attempt {os.environ.get(ATTEMPT_VARIABLE, '1')})", flush=True)
    try:
        _inject_fault(run)
        record = execute(run, run_dir)
    except BaseException as error:  # noqa: BLE001  (every failure is reported in error.txt)
        text = traceback.format_exc()
        if _interrupted(error):  # the reason alone: where Ctrl-C landed is noise (run.log has it)
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # not cut short by another
            try:
                reason = "Ctrl-C stopped it while it ran"
                write_error(run_dir, f"{run.run_id} interrupted: {reason}\n{INTERRUPTED}")
                print(text, file=sys.stderr, flush=True)
            finally:
                signal.signal(signal.SIGINT, previous)
            return 130
        print(text, file=sys.stderr, flush=True)
        full = out_of_space_line(error)  # the reason's line, not the tail of h5py's message
        write_error(run_dir, f"{run.run_id} failed:\n{text}" + (f"\n{full}" if full else ""))
        return REFUSED_STATUS if isinstance(error, VLMRefused) else 1
    print(f"== {run.run_id}: final success {record.target_success:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
