"""`gameon bench run` end to end with tiny budgets: records, resume after a kill, retries, Ray."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import pytest
from rich.console import Console

from gameon.atomic import out_of_space_line
from gameon.benchmark import runner, runs
from gameon.benchmark.commands import main
from gameon.benchmark.matrix import expand, load_spec
from gameon.benchmark.report import load_runs
from gameon.benchmark.runner import (
    MatrixProgress,
    RunnerOptions,
    duration_text,
    load_factor,
    matrix_seconds,
    plan_line,
    results_lock,
    run_seconds,
    schedule_seconds,
)
from gameon.records import RECORD_FILE, load_record
from gameon.text import plural

ONLINE = """
name = "{name}"
seeds = {seeds}
eval_episodes_per_skill = 1
curricula = ["fixed"]

[online]
learners = ["ppo"]
env_ids = ["GameOn/Reach-v0"]
budget = {{ total_timesteps = 256, eval_every = 128, num_envs = 2 }}
ppo = {{ num_steps = 64, num_minibatches = 4, update_epochs = 1 }}
"""
COLLECT = """
name = "collect"
seeds = [0]
eval_episodes_per_skill = 1
curricula = ["lp"]

[collect]
learners = ["bc"]
env_ids = ["GameOn/Reach-v0"]
budget = { iterations = 2, episodes_per_iteration = 1, seed_episodes = 2, num_updates = 20 }
settings = { practice_env_id = "GameOn/Reach-v0", auto_stop = false }
"""


def spec_file(tmp_path: Path, text: str = ONLINE, name: str = "tiny", seeds=(0, 1)) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.format(name=name, seeds=list(seeds)))
    return path


def command(spec: Path, results: Path, *options: str) -> list[str]:
    return ["bench", "run", str(spec), "--results", str(results), "--no-report", *options]


def records(results: Path) -> dict[str, Path]:
    return {p.parent.name: p for p in sorted(results.glob(f"*/{RECORD_FILE}"))}


def test_a_run_folder_that_cannot_be_written_ends_the_matrix_in_one_line(
    tmp_path, capsys, monkeypatch
):
    """A read-only run folder stopped the matrix with a PermissionError traceback."""
    results = tmp_path / "results"
    prepare = runner.prepare

    def read_only(run, run_dir):
        if run.seed == 1:
            raise PermissionError(errno.EACCES, "Permission denied", str(run_dir / "run.json"))
        prepare(run, run_dir)

    monkeypatch.setattr(runner, "prepare", read_only)
    assert main(command(spec_file(tmp_path), results, "--workers", "1")) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.endswith(
        f"gameon bench run: cannot write {results}/online__Reach__fixed__ppo__s1/run.json: "
        "Permission denied; make it writable and run the same command again (what was finished "
        "or committed is kept)\n"
    )


def test_a_full_disk_is_one_line_saying_what_to_do(tmp_path, capsys, monkeypatch):
    """It was a traceback ending in `OSError: [Errno 28]` after the plan line."""
    results = tmp_path / "results"

    def full(spec, results_dir):
        raise OSError(errno.ENOSPC, "No space left on device", str(results_dir / "matrix.json"))

    monkeypatch.setattr(runner, "write_matrix_file", full)
    assert main(command(spec_file(tmp_path), results)) == 1
    assert capsys.readouterr().err == (
        f"gameon bench run: no space left on the disk writing {results / 'matrix.json'}: free "
        "some and run the same command again (what was finished or committed is kept, and files "
        "are written whole or not at all)\n"
    )
    h5py_style = OSError(
        "Can't write data (file write failed: errno = 28, "
        "error message = 'No space left on device')"
    )
    assert out_of_space_line(h5py_style).startswith("no space left on the disk: free some")
    assert out_of_space_line(OSError(errno.EACCES, "Permission denied")) is None


def test_a_disk_that_fills_between_runs_loses_no_run_from_the_count(tmp_path, capsys, monkeypatch):
    """The run being prepared when the disk filled was in none of the summary's counts."""
    results = tmp_path / "results"
    prepared = []

    def prepare(run, run_dir):
        if prepared:
            raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "run.json"))
        prepared.append(run.run_id)
        return real_prepare(run, run_dir)

    real_prepare = runner.prepare
    monkeypatch.setattr(runner, "prepare", prepare)
    assert main(command(spec_file(tmp_path), results, "--workers", "1")) == 1
    captured = capsys.readouterr()
    assert "1 run done now, 0 finished before, 0 failed, 0 interrupted, 1 not started" in (
        captured.out
    )
    assert "no space left on the disk writing" in captured.err


def test_online_matrix_writes_valid_records(tmp_path, capsys):
    results = tmp_path / "results"
    assert main(command(spec_file(tmp_path), results, "--workers", "2")) == 0
    found = records(results)
    assert sorted(found) == ["online__Reach__fixed__ppo__s0", "online__Reach__fixed__ppo__s1"]
    for run_id, path in found.items():
        record = load_record(path)
        assert (record.run_id, record.protocol, record.learner) == (run_id, "online", "ppo")
        assert [p.step for p in record.curve] == [128, 256]
        assert record.env_steps == 256 and record.curve_unit == "env_steps"
        assert len(record.evaluation.episodes) == 1 and record.evaluation.episodes_per_skill == 1
        assert (path.parent / record.checkpoint).is_file()
        assert "final success" in (path.parent / "run.log").read_text()
    matrix = json.loads((results / "matrix.json").read_text())
    assert [r["run_id"] for r in matrix["runs"]] == sorted(found)
    captured = capsys.readouterr()
    assert captured.out.startswith("tiny: 2 runs to do, 2 at a time: about ")
    assert "2 runs done now" in captured.out and "gameon bench report" in captured.out
    each = [int(s) for s in re.findall(r"^done \S+ \((\d+) s\)$", captured.out, re.MULTILINE)]
    total = re.search(r"^2 runs done now, .* \((\d+) s\)$", captured.out, re.MULTILINE)
    assert len(each) == 2 and total and int(total[1]) >= max(each)  # the total includes each
    progress = [line for line in captured.err.splitlines() if "runs finished" in line]
    assert progress[0].startswith("1/2 runs finished, ~") and progress[0].endswith(" left")
    assert progress[1] == "2/2 runs finished"

    before = {run_id: path.stat().st_mtime_ns for run_id, path in found.items()}
    assert main(command(spec_file(tmp_path), results)) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiny: 0 runs to do (2 of 2 finished before): nothing to run")
    assert "2 finished before" in out
    assert {run_id: path.stat().st_mtime_ns for run_id, path in found.items()} == before


def smoke_runs() -> list:
    return expand(load_spec("smoke", check=False))


def test_the_smoke_preset_is_expected_to_take_about_two_minutes_on_two_idle_cores() -> None:
    assert 100 <= matrix_seconds(smoke_runs(), workers=2) <= 150
    assert schedule_seconds([10.0, 10.0, 10.0], workers=2) == 20.0
    assert schedule_seconds([10.0, 10.0, 10.0], workers=1) == 30.0


def test_a_collect_run_is_expected_to_take_its_updates_and_episodes_and_a_resume_less() -> None:
    """The default `gameon experiment` (5 iterations of 5000 BC updates, 610 episodes) took
    about 5 minutes idle and said nothing of it; a resume counts what is left."""
    from gameon.experimenter.loop import LoopConfig

    values = dataclasses.asdict(LoopConfig())
    updates = 6 * 5000 * runner.UPDATE_SECONDS["bc"]
    episodes = (50 + 5 * 20 + 6 * 10 * 7 + 2 * 20 * 1) * runner.EPISODE_SECONDS
    assert runner.collect_seconds(values) == pytest.approx(
        runner.STARTUP_SECONDS + updates + episodes
    )
    assert 240 <= runner.collect_seconds(values) <= 330
    resumed = runner.collect_seconds(values, done=3)  # iterations 4 and 5 left
    left = 2 * 5000 * runner.UPDATE_SECONDS["bc"] + (2 * 20 + 2 * 70 + 40) * runner.EPISODE_SECONDS
    assert resumed == pytest.approx(runner.STARTUP_SECONDS + left)


def test_a_ppo_run_is_expected_to_take_its_whole_rollouts() -> None:
    """PPO rounds total_timesteps up to whole rollouts (num_envs * num_steps): 100 steps of
    rollouts of 2 * 64 are 128 steps, and the estimate counts those, not 100."""
    ppo = next(run for run in smoke_runs() if run.learner == "ppo")
    budget = {**ppo.budget, "total_timesteps": 128, "eval_every": 0}
    whole = dataclasses.replace(ppo, budget=budget)
    short = dataclasses.replace(ppo, budget={**budget, "total_timesteps": 100})
    assert run_seconds(short) == pytest.approx(run_seconds(whole))
    longer = dataclasses.replace(ppo, budget={**budget, "total_timesteps": 129})
    assert run_seconds(longer) > run_seconds(whole)


def test_the_first_line_says_runs_workers_and_the_time_idle_and_under_load(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    spec = load_spec("smoke", check=False)
    idle = plan_line(spec, tmp_path, RunnerOptions(workers=2), load=0.0)
    assert idle == (
        "smoke: 20 runs to do, 2 at a time: about 2 min on an idle 2-core machine, "
        "longer when it is busy"
    )
    busy = plan_line(spec, tmp_path, RunnerOptions(workers=2), load=2.0)
    assert busy.endswith("2-core machine; here, now (load 2.0 on 2 CPUs): about 5 min")
    one = plan_line(spec, tmp_path, RunnerOptions(workers=1), load=0.0)
    assert one.endswith(
        "about 2 min on an idle 2-core machine; here, now (load 0.0 on 2 CPUs): about 4 min"
    )
    assert load_factor(2.0, workers=2, cpus=2) == 2.0 and load_factor(0.0, 1, 2) == 1.0


def test_time_left_follows_the_pace_the_runs_finish_at() -> None:
    runs = smoke_runs()[:4]
    progress = MatrixProgress(runs, workers=2)
    expected = [progress.expected[run.run_id] for run in runs]
    assert progress.seconds_left({}) == pytest.approx(schedule_seconds(expected, 2))
    progress.finish(runs[0].run_id, 2 * expected[0])  # twice as slow as expected
    assert progress.factor == pytest.approx(2.0)
    running = {runs[1].run_id: 1.0}
    left = [2 * expected[1] - 1.0, 2 * expected[2], 2 * expected[3]]
    assert progress.seconds_left(running) == pytest.approx(schedule_seconds(left, 2))
    assert progress.completed(running) == pytest.approx(expected[0] + 0.5)
    assert progress.line(running).startswith("1/4 runs finished, ~")
    progress.finish(runs[1].run_id, 1.0, failed=True)  # a failure does not set the pace
    assert progress.factor == pytest.approx(2.0)
    assert progress.line({}).startswith("2/4 runs finished (1 failed), ~")


def test_time_left_of_each_kind_of_run_follows_the_pace_of_that_kind() -> None:
    """Fast online runs ending first do not set the pace of the slower collect runs."""
    runs = smoke_runs()
    ppo = [run for run in runs if (run.protocol, run.learner) == ("online", "ppo")][:2]
    bc = [run for run in runs if (run.protocol, run.learner) == ("collect", "bc")][:2]
    progress = MatrixProgress([*ppo, *bc], workers=2)
    expected = {run.run_id: progress.expected[run.run_id] for run in [*ppo, *bc]}
    progress.finish(ppo[0].run_id, 0.5 * expected[ppo[0].run_id])
    left = [0.5 * expected[ppo[1].run_id], *(0.5 * expected[run.run_id] for run in bc)]
    assert progress.seconds_left({}) == pytest.approx(schedule_seconds(left, 2))  # none ended
    progress.finish(bc[0].run_id, 3 * expected[bc[0].run_id])
    left = [0.5 * expected[ppo[1].run_id], 3 * expected[bc[1].run_id]]
    assert progress.seconds_left({}) == pytest.approx(schedule_seconds(left, 2))
    running = {bc[1].run_id: 3.0}
    assert progress.completed(running) == pytest.approx(
        expected[ppo[0].run_id] + expected[bc[0].run_id] + 1.0
    )


def test_durations_below_ninety_seconds_are_shown_to_the_second(monkeypatch) -> None:
    """Rounded to tens, a matrix of one 12 s run said it took 10 s."""
    texts = [duration_text(s) for s in (0.2, 3.4, 9.4, 12.4, 14, 44, 89, 150, 5400)]
    assert texts == ["0 s", "3 s", "9 s", "12 s", "14 s", "44 s", "89 s", "2 min", "1.5 h"]
    monkeypatch.setattr(runner, "run_seconds", lambda run: 3.0)
    assert MatrixProgress(smoke_runs()[:1], workers=2).line({}) == "0/1 runs finished, ~3 s left"


class FailsAtOnce(runner.LocalLauncher):
    """A launcher that runs nothing: every attempt fails at once, as if its worker had died;
    `on_this_machine` False stands for a Ray cluster given by address."""

    def __init__(self, workers: int, on_this_machine: bool = True) -> None:
        super().__init__(workers)
        self.on_this_machine = on_this_machine

    def start(self, run_dir: Path, attempt: int) -> Path:
        return run_dir

    def poll(self, handle: Path) -> tuple[int, str]:
        return 1, ""

    def stop(self, handles: list[Path]) -> None:
        pass


def test_on_a_ray_cluster_the_plan_and_the_time_left_ignore_this_machines_cpus(
    tmp_path, monkeypatch, capsys
) -> None:
    """A 64-CPU cluster driven from a 2-CPU machine: the first line claims no count of CPUs and
    the time left stays at the idle estimate until runs end (the local load would make it 32x)."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(runner, "load_average", lambda: 0.0)
    monkeypatch.setattr(runner, "run_seconds", lambda run: 100.0)
    monkeypatch.setattr(
        runner, "make_launcher", lambda options, lock_fd=None: FailsAtOnce(64, False)
    )
    monkeypatch.setattr(runner, "head_answers", lambda address: True)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec = spec_file(tmp_path)
    results = tmp_path / "results"
    args = ["--runner", "ray", "--ray-address", "127.0.0.1:6379", "--retries", "0"]
    assert main(command(spec, results, *args)) == 1
    captured = capsys.readouterr()
    first = captured.out.splitlines()[0]
    assert first.startswith("tiny: 2 runs to do, as many at a time as the Ray cluster has CPUs: ")
    progress = [line for line in captured.err.splitlines() if "runs finished" in line]
    assert progress == ["1/2 runs finished (1 failed), ~2 min left", "2/2 runs finished (2 failed)"]

    smoke = load_spec("smoke", check=False)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert ", as many at a time as" in plan_line(smoke, tmp_path, RunnerOptions(runner="ray"))
    assert ", 8 at a time:" in plan_line(smoke, tmp_path, RunnerOptions(runner="ray", workers=8))
    monkeypatch.delenv("RAY_ADDRESS")
    assert ", 2 at a time:" in plan_line(smoke, tmp_path, RunnerOptions(runner="ray"))


def test_paths_are_printed_whole_and_short_times_as_they_are_in_a_log(
    tmp_path, monkeypatch, capsys
) -> None:
    """With stdout a file or a pipe (80 columns to rich), no path is folded onto the next line."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(runner, "make_launcher", lambda options, lock_fd=None: FailsAtOnce(2))
    results = tmp_path / "a_rather_long_results_folder_name" / "for_the_paper_preset_on_host_b"
    run_dir = results / "online__Reach__fixed__ppo__s0"
    assert main(command(spec_file(tmp_path), results, "--retries", "0")) == 1
    lines = capsys.readouterr().out.splitlines()
    failed = [line for line in lines if line.startswith("failed online__Reach__fixed__ppo__s0 ")]
    assert len(failed) == 1 and failed[0].endswith(f"(see {run_dir / 'error.txt'})")
    assert f"records: {results}/<run_id>/record.json (matrix: {results}/matrix.json)" in lines
    assert f"  failed: online__Reach__fixed__ppo__s0 (see {run_dir}/error.txt)" in lines
    reason = runs.failure_reason((run_dir / "error.txt").read_text())
    assert reason == "worker process exited with status 1"  # not a line of its run.log
    assert lines[-1] == f"table and plots: gameon bench report {results}"
    summary = [line for line in lines if line.startswith("0 runs done now, 0 finished before")]
    assert re.fullmatch(
        r"0 runs done now, 0 finished before, 2 failed, 0 retried \(\d s\)", summary[0]
    )


def test_only_picks_by_text_or_by_a_glob_over_whole_run_ids() -> None:
    """`--only s1` picks every id containing s1 (s10 too); a glob matches whole ids, so
    `*__s1` is seed 1 alone."""
    smoke = load_spec("smoke", check=False)
    protocols = tuple(dataclasses.replace(p, seeds=(1, 10)) for p in smoke.protocols)
    spec = dataclasses.replace(smoke, protocols=protocols)
    every = runner.select_runs(spec, None)
    assert {run.seed for run in runner.select_runs(spec, "s1")} == {1, 10}
    seed_one = runner.select_runs(spec, "*__s1")
    assert [run.run_id for run in seed_one] == [run.run_id for run in every if run.seed == 1]
    fixed_online = runner.select_runs(spec, "online__*__fixed__*")
    assert fixed_online and all(
        run.protocol == "online" and run.curriculum.name == "fixed" for run in fixed_online
    )
    with pytest.raises(ValueError, match=r"matches '\*__s2' \(a glob matches whole run ids\)"):
        runner.select_runs(spec, "*__s2")


def test_a_different_spec_in_the_same_results_dir_is_refused(tmp_path, capsys):
    results = tmp_path / "results"
    assert main(command(spec_file(tmp_path), results, "--only", "nothing-matches")) == 2
    assert "no run id of matrix 'tiny' contains 'nothing-matches'" in capsys.readouterr().err
    assert not results.exists()
    results.mkdir()
    (results / "matrix.json").write_text(json.dumps({"format": "gameon-matrix-v1", "runs": []}))
    assert main(command(spec_file(tmp_path), results)) == 2
    captured = capsys.readouterr()
    assert "holds the results of another matrix" in captured.err
    assert captured.out == ""  # refused before the plan line, which would promise runs


def test_a_spec_that_cannot_run_is_refused_before_the_plan_line_and_creates_nothing(
    tmp_path, capsys
):
    spec = spec_file(tmp_path, ONLINE + "settings = {{ no_such_setting = 1 }}\n")
    results = tmp_path / "results"
    assert main(command(spec, results)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no_such_setting is not a setting of ppo" in captured.err
    assert not results.exists()


@pytest.mark.parametrize("where", ["a_file", "a_file/below", "/proc/no_such_folder"])
def test_a_results_path_that_cannot_be_a_folder_is_refused_in_one_line(tmp_path, capsys, where):
    """No traceback: exit 2 and one line naming the path, before the plan line; nothing written."""
    if where.startswith("/proc") and not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    (tmp_path / "a_file").write_text("mine\n")
    results = tmp_path / where if not where.startswith("/") else Path(where)
    assert main(command(spec_file(tmp_path), results)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("gameon bench run: ") and str(results) in captured.err
    assert "give --results a folder you can write to" in captured.err
    assert (tmp_path / "a_file").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "tiny.toml"]


@pytest.mark.parametrize("held", ["record.json", "state.json", "run.json"])
def test_one_run_s_folder_given_as_the_results_folder_is_refused(tmp_path, capsys, held):
    """A `gameon experiment` folder (or a bench run's) was taken as a results folder: its own
    files were then listed by the report as skipped run folders."""
    run_folder = tmp_path / "experiment__lp__bc__0"
    run_folder.mkdir()
    (run_folder / held).write_text("{}")
    assert main(command(spec_file(tmp_path), run_folder)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert f"{run_folder} is one run's folder (it holds {held}), not a results folder" in (
        captured.err
    )
    assert sorted(p.name for p in run_folder.iterdir()) == [held]


def test_when_every_run_failed_the_report_says_why_without_a_useless_retry(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(runner, "make_launcher", lambda options, lock_fd=None: FailsAtOnce(2))
    results = tmp_path / "results"
    args = ["bench", "run", str(spec_file(tmp_path)), "--results", str(results), "--retries", "0"]
    assert main(args) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert f"no report: no valid run records in {results}: nothing to report" in out
    assert "retry with" not in out


def wait_for(condition, timeout: float, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, "the matrix ended before it could be killed"
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def start_matrix(args: list[str], log: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gameon.benchmark.commands", *args],
        stdout=open(log, "w"),  # noqa: SIM115  (closed with the process)
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **env},
    )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_results_folder_in_use_is_refused_before_the_plan_line(tmp_path, capsys):
    """The second invocation printed "2 runs to do ... about 50 s" and the matrix's name before
    saying another one was using the folder."""
    results = tmp_path / "results"
    with results_lock(results):
        assert main(command(spec_file(tmp_path), results)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "another `gameon bench run` (or a worker it left running) is using" in captured.err


def test_a_ray_address_where_no_head_answers_is_refused_at_once(tmp_path, capsys):
    """ray.init retried a dead address for about 14 minutes, then ended in a traceback."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"  # nothing listens there
    started = time.monotonic()
    args = command(spec_file(tmp_path), tmp_path / "results", "--runner", "ray")
    assert main([*args, "--ray-address", address]) == 2
    assert time.monotonic() - started < 30
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"no Ray head answers at {address} (RAY_ADDRESS or --ray-address)" in captured.err


def wait_for_lock(results: Path, timeout: float = 30) -> None:
    """Until the killed workers have exited and released the results directory."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with results_lock(results):
                return
        except ValueError:
            assert time.monotonic() < deadline, "the killed workers still hold the results"
            time.sleep(0.1)


def test_killed_matrix_loses_nothing_and_resumes(tmp_path, capsys):
    results = tmp_path / "results"
    args = command(spec_file(tmp_path, seeds=(0, 1, 2)), results, "--workers", "1")
    process = start_matrix(args, tmp_path / "first.log")
    try:
        wait_for(lambda: len(records(results)) >= 1, 120, process)
        os.kill(process.pid, signal.SIGKILL)  # the matrix only: its running worker lives on
        process.wait()
        if group_alive(process.pid):
            with pytest.raises(ValueError, match="or a worker it left running"):  # noqa: SIM117
                with results_lock(results):
                    pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    wait_for_lock(results)
    first = records(results)
    assert first, "no record before the kill"
    for path in results.glob("*/*record*"):
        if path.name == RECORD_FILE:
            load_record(path)  # every record.json is whole and valid
        else:
            assert path.name.startswith(".") and path.name.endswith(".tmp")
    finished = {run_id: (p.stat().st_mtime_ns, p.read_bytes()) for run_id, p in first.items()}

    assert main(command(spec_file(tmp_path, seeds=(0, 1, 2)), results, "--workers", "2")) == 0
    assert f"{len(first)} finished before" in capsys.readouterr().out
    after = records(results)
    assert len(after) == 3
    for run_id, (mtime, content) in finished.items():
        assert (after[run_id].stat().st_mtime_ns, after[run_id].read_bytes()) == (mtime, content)


def test_killed_collect_run_resumes_from_its_committed_iteration(tmp_path):
    results = tmp_path / "results"
    run_dir = results / "collect__Reach__lp__bc__s0"
    spec = tmp_path / "collect.toml"
    spec.write_text(COLLECT)
    args = command(spec, results)
    process = start_matrix(args, tmp_path / "first.log")
    try:
        wait_for(lambda: (run_dir / "state.json").is_file(), 120, process)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    wait_for_lock(results)
    committed = json.loads((run_dir / "state.json").read_text())["history"]
    assert main(args) == 0
    state = json.loads((run_dir / "state.json").read_text())
    assert [h["iteration"] for h in state["history"]] == [0, 1, 2]
    assert state["history"][: len(committed)] == committed
    record = load_record(run_dir)
    assert (record.run_id, record.curve_unit, len(record.curve)) == (run_dir.name, "iterations", 3)


def test_failed_run_is_retried_then_recorded_as_an_error(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    spec = spec_file(tmp_path)
    monkeypatch.setenv("GAMEON_BENCH_FAULT", "raise:__s1")
    assert main(command(spec, results, "--retries", "0")) == 1
    failed = results / "online__Reach__fixed__ppo__s1"
    reason = "RuntimeError: injected failure (GAMEON_BENCH_FAULT=raise:__s1)"
    assert runs.failure_reason((failed / "error.txt").read_text()) == reason
    skipped = {Path(s.path).name: s.reason for s in load_runs(results)[1]}
    assert skipped == {failed.name: f"failed: {reason} (see {failed / 'error.txt'})"}
    assert not (failed / RECORD_FILE).exists()
    assert sorted(records(results)) == ["online__Reach__fixed__ppo__s0"]
    assert "1 failed" in capsys.readouterr().out

    monkeypatch.setenv("GAMEON_BENCH_FAULT", "crash:__s1")
    assert main(command(spec, results, "--retries", "1")) == 0
    out = capsys.readouterr().out
    assert "retrying online__Reach__fixed__ppo__s1: worker process killed by SIGKILL" in out
    assert load_record(failed).run_id == failed.name
    assert not (failed / "error.txt").exists()
    assert "(attempt 2)" in (failed / "run.log").read_text()


REFUSED_MATRIX = """
name = "refused"
seeds = [0, 1]
eval_episodes_per_skill = 1
curricula = [{{ name = "vlm", backend = "openai", model = "gpt-4o-mini", base_url = "{url}/v1" }}]

[online]
learners = ["ppo"]
env_ids = ["GameOn/Reach-v0"]
budget = {{ total_timesteps = 128, eval_every = 128, num_envs = 2 }}
ppo = {{ num_steps = 64, num_minibatches = 4, update_epochs = 1 }}
"""


def test_a_refused_model_is_not_retried_and_its_other_runs_wait_for_the_rerun(
    tmp_path, monkeypatch, capsys
):
    """Before, each run of a refused model was started and retried, each refused in turn."""
    from fake_http import Scripted, ScriptedServer, openai_reply

    monkeypatch.setenv("OPENAI_API_KEY", "sk-refused-SECRET")
    server = ScriptedServer("/v1/chat/completions")
    try:
        server.script(Scripted(401, json.dumps({"error": {"code": 401, "message": "bad key"}})))
        spec = tmp_path / "refused.toml"
        spec.write_text(REFUSED_MATRIX.format(url=server.url))
        results = tmp_path / "results"
        assert main(command(spec, results, "--workers", "1", "--retries", "1")) == 1
        assert len(server.requests) == 1  # not retried; the second vlm run never started
        out = " ".join(capsys.readouterr().out.split())
        vlm = f"online__Reach__vlm-openai-http_127.0.0.1_{server.port}_v1-gpt_4o_mini__ppo"
        assert f"failed {vlm}__s0 after 1 attempt (its model refused it: another attempt" in out
        assert f"not starting 1 more vlm[openai:gpt-4o-mini] run ({vlm}__s1)" in out
        assert "0 runs done now, 0 finished before, 2 failed, 0 retried" in out
        assert records(results) == {}
        reasons = {Path(s.path).name: s.reason for s in load_runs(results)[1]}
        assert set(reasons) == {f"{vlm}__s0", f"{vlm}__s1"}
        for reason in reasons.values():  # both name the refusal
            assert "the API key was not accepted: check OPENAI_API_KEY" in reason
        note = (results / f"{vlm}__s1" / "error.txt").read_text()
        assert note.startswith(f"{vlm}__s1 not started: {vlm}__s0's model refused it")

        server.script(*[openai_reply(json.dumps({"tasks": ["reach the red block"]}))] * 2)
        assert main(command(spec, results, "--workers", "2")) == 0  # the key mended: both run
        assert sorted(records(results)) == [f"{vlm}__s{seed}" for seed in (0, 1)]
        assert "SECRET" not in "".join(
            p.read_text(errors="replace")
            for p in results.rglob("*.*")
            if p.is_file() and p.suffix in (".txt", ".json", ".log")
        )
    finally:
        server.close()


def test_only_the_runs_asking_the_refused_model_are_taken_off_the_queue(tmp_path, capsys):
    spec = load_spec("smoke")
    collect = [run for run in expand(spec) if run.protocol == "collect" and run.seed == 0]
    refused = next(run for run in collect if run.curriculum.name == "vlm")
    same_model = dataclasses.replace(refused, run_id=f"{refused.run_id}-again", seed=7)
    other_model = dataclasses.replace(
        refused,
        run_id=f"{refused.run_id}-gpt-4o",
        curriculum=dataclasses.replace(
            refused.curriculum, options={"backend": "openai", "model": "gpt-4o"}
        ),
    )
    others = [run for run in collect if run.curriculum.name != "vlm"]
    pending = deque([(same_model, 2, ["attempt 1: lost with its node"]), (other_model, 1, [])])
    pending.extend((run, 1, []) for run in others)
    (tmp_path / refused.run_id).mkdir()
    runs.write_error(tmp_path / refused.run_id, "VLMRefused: the API key was not accepted")
    skipped = runner._skip_refused(refused, tmp_path, pending, Console(file=io.StringIO()))
    assert [(r.run_id, r.status, r.attempts) for r in skipped] == [(same_model.run_id, "failed", 1)]
    assert [entry[0] for entry in pending] == [other_model, *others]
    note = (tmp_path / same_model.run_id / "error.txt").read_text()
    assert note.startswith("attempt 1: lost with its node")  # an earlier attempt's reason kept
    assert runs.failure_reason(note) == "VLMRefused: the API key was not accepted"


def test_a_run_stopped_by_ctrl_c_is_reported_interrupted_and_a_rerun_runs_it(
    tmp_path, monkeypatch, capsys
):
    """The worker's own error.txt: Ctrl-C is "interrupted" (exit 130), an exception "failed" with
    its exception line as the reason; either way the same command runs the run again."""
    spec = spec_file(tmp_path, seeds=(0,))
    results = tmp_path / "results"
    (run,) = expand(load_spec(spec, check=False))
    run_dir = results / run.run_id
    runs.prepare(run, run_dir)

    def stopped(run, run_dir):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "execute", stopped)
    assert runs.main([str(run_dir)]) == 130
    text = (run_dir / "error.txt").read_text()
    clean = f"{run.run_id} interrupted: Ctrl-C stopped it while it ran\nKeyboardInterrupt\n"
    assert text == clean and runs.was_interrupted(text)  # no traceback of where it landed
    assert "Traceback" in capsys.readouterr().err  # that goes to the log (run.log)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    def stopped_in_a_cleanup(run, run_dir):  # a library failing as Ctrl-C unwinds it
        try:
            raise KeyboardInterrupt
        finally:
            raise RuntimeError("cannot close the figure")

    monkeypatch.setattr(runs, "execute", stopped_in_a_cleanup)
    assert runs.main([str(run_dir)]) == 130
    assert (run_dir / "error.txt").read_text() == clean
    ((_, reason),) = [(s.path, s.reason) for s in load_runs(results)[1]]
    assert reason.startswith("interrupted (Ctrl-C, or its bench run was stopped) before its ")
    assert "failed" not in reason

    def broken(run, run_dir):
        raise ValueError("Seed must be between 0 and 2**32 - 1")

    monkeypatch.setattr(runs, "execute", broken)
    assert runs.main([str(run_dir)]) == 1
    ((_, reason),) = [(s.path, s.reason) for s in load_runs(results)[1]]
    assert reason.startswith("failed: ValueError: Seed must be between 0 and 2**32 - 1 (see ")

    def disk_full(run, run_dir):  # h5py's error: the errno only in a multi-line text
        raise RuntimeError(
            "Can't synchronously write data (file write failed: time = Thu Dec  3 2026,\n"
            " filename = 'main_data.hdf5', file descriptor = 8, errno = 28, error message = "
            "'No space left on device', buf = 0x1, total write size = 4096)"
        )

    monkeypatch.setattr(runs, "execute", disk_full)
    assert runs.main([str(run_dir)]) == 1  # its reason was ", filename = 'main_data.hdf5', ..."
    reason = runs.failure_reason((run_dir / "error.txt").read_text())
    assert reason.startswith("no space left on the disk: free some and run the same command")

    monkeypatch.undo()
    assert main(command(spec, results)) == 0
    assert "1 run done now, 0 finished before" in capsys.readouterr().out
    assert load_record(run_dir).run_id == run.run_id and not (run_dir / "error.txt").exists()


def test_a_collect_run_whose_learner_was_stopped_after_an_evaluation_runs_again(
    tmp_path, monkeypatch, capsys
):
    """A stopped BC or IQL keeps its last evaluation's checkpoint.pt and eval.json, and a learner
    refuses a folder holding them; the collect loop removes the uncommitted policy folder as the
    run starts again (the runner empties only an online run's folder), so the rerun finishes."""
    from gameon.baselines import bc, common

    spec = tmp_path / "collect.toml"
    spec.write_text(COLLECT)
    results = tmp_path / "results"
    (run,) = expand(load_spec(spec, check=False))
    run_dir = results / run.run_id
    runs.prepare(run, run_dir)
    train, progress = bc.train, common.OfflineRun.print_progress

    def evaluating_every_10_updates(args):
        args.eval_every = 10
        return train(args)

    def interrupted_in_update_11(offline_run, update, *rest):
        if update == 11:
            raise KeyboardInterrupt
        progress(offline_run, update, *rest)

    monkeypatch.setattr(bc, "train", evaluating_every_10_updates)
    monkeypatch.setattr(common.OfflineRun, "print_progress", interrupted_in_update_11)
    assert runs.main([str(run_dir)]) == 130
    policy = run_dir / "policies" / "iter_0"
    assert (policy / "checkpoint.pt").is_file() and (policy / "eval.json").is_file()
    kept = f"{policy} keeps its TensorBoard logs and the checkpoint.pt"
    assert kept in (policy / "train.log").read_text() and kept not in capsys.readouterr().err

    monkeypatch.undo()
    assert main(command(spec, results)) == 0
    assert "1 run done now, 0 finished before" in capsys.readouterr().out
    assert load_record(run_dir).run_id == run.run_id and not (run_dir / "error.txt").exists()


LONGER = ONLINE.replace("total_timesteps = 256", "total_timesteps = 1024")
"""Runs of a few seconds after their first checkpoint, long enough to be stopped in flight."""


def test_ctrl_c_on_the_whole_matrix_reports_the_stopped_runs_interrupted_and_how_to_resume(
    tmp_path, capsys
):
    """SIGINT to the runner alone (its workers in their own session, so they cannot say it
    themselves): the run in flight is marked interrupted, the matrix says what finished, was
    interrupted and did not start, and the same command then finishes every run in the folders
    the stopped attempt left (the learners refuse a folder holding a run: the runner empties
    it)."""
    results = tmp_path / "results"
    spec = spec_file(tmp_path, LONGER, seeds=(0, 1))
    args = command(spec, results, "--workers", "1")
    log = tmp_path / "first.log"

    def in_flight() -> list[Path]:
        return [
            d
            for d in results.glob("online__*")
            if (d / "checkpoint.pt").is_file() and not (d / RECORD_FILE).is_file()
        ]

    process = start_matrix(args, log)
    try:
        wait_for(lambda: bool(in_flight()), 120, process)
        os.kill(process.pid, signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    wait_for_lock(results)
    out = " ".join(log.read_text().split())
    stopped = re.search(
        r"stopped by Ctrl-C: (\d) runs? done now, 0 finished before, 0 failed, "
        r"(\d) interrupted, (\d) not started",
        out,
    )
    assert stopped, out
    done, interrupted, not_started = (int(n) for n in stopped.groups())
    assert interrupted == 1 and done + interrupted + not_started == 2
    skipped = {Path(s.path).name: s.reason for s in load_runs(results)[1]}
    assert len(skipped) == 1, skipped
    ((name, reason),) = skipped.items()
    assert reason.startswith("interrupted (Ctrl-C, or its bench run was stopped) before its ")
    assert f"interrupted: {name} (see {results / name / 'error.txt'})" in out
    assert "to resume, run the same `gameon bench run` again" in out
    text = (results / name / "error.txt").read_text()
    assert f"{name} interrupted: Ctrl-C stopped the bench run while it ran" in text
    assert (results / name / "checkpoint.pt").is_file()  # the stopped attempt's files

    assert main(args) == 0
    assert f"{plural(2 - done, 'run')} done now, {done} finished before, 0 failed" in " ".join(
        capsys.readouterr().out.split()
    )
    assert sorted(records(results)) == [
        "online__Reach__fixed__ppo__s0",
        "online__Reach__fixed__ppo__s1",
    ]
    assert not (results / name / "error.txt").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_run_starts_stops_that_run_and_counts_it_interrupted(
    tmp_path, monkeypatch, capsys, signum
):
    """Ctrl-C (or SIGTERM) right as the runner started a run's worker, before its bookkeeping:
    the run was counted neither interrupted nor not started, and its worker ran on unstopped."""
    results = tmp_path / "results"
    started: list = []
    start = runner.LocalLauncher.start

    def start_then_signal(self, run_dir: Path, attempt: int):
        started.append(start(self, run_dir, attempt))
        signal.raise_signal(signum)
        return started[-1]

    monkeypatch.setattr(runner.LocalLauncher, "start", start_then_signal)
    args = command(spec_file(tmp_path, seeds=(0,)), results)
    if signum == signal.SIGINT:
        assert main(args) == 130
    else:
        with pytest.raises(SystemExit, match="143"):  # as the runner's SIGTERM handler raises it
            main(args)
    out = " ".join(capsys.readouterr().out.split())
    assert "0 runs done now, 0 finished before, 0 failed, 1 interrupted, 0 not started" in out
    (worker,) = started
    assert worker.poll() is not None, "the run's worker was left running"
    text = (results / "online__Reach__fixed__ppo__s0" / "error.txt").read_text()
    assert "interrupted: " in text and "stopped the bench run while it ran" in text


def test_a_run_that_finishes_as_ctrl_c_arrives_is_counted_done(tmp_path, monkeypatch, capsys):
    """Its record written, its end not yet seen by the runner: the run was counted neither done
    nor interrupted, and the resume hint said it "skips the 0 finished runs"."""
    start = runner.LocalLauncher.start

    def start_finish_then_signal(self, run_dir: Path, attempt: int):
        worker = start(self, run_dir, attempt)
        worker.wait()
        signal.raise_signal(signal.SIGINT)
        return worker

    monkeypatch.setattr(runner.LocalLauncher, "start", start_finish_then_signal)
    results = tmp_path / "results"
    assert main(command(spec_file(tmp_path, seeds=(0, 1)), results, "--workers", "1")) == 130
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "stopped by Ctrl-C: 1 run done now, 0 finished before, 0 failed, 0 interrupted, "
        "1 not started" in out
    )
    assert "it keeps and skips the 1 finished runs" in out
    assert sorted(records(results)) == ["online__Reach__fixed__ppo__s0"]
    assert not (results / "online__Reach__fixed__ppo__s0" / "error.txt").exists()


def use_launcher(monkeypatch, launcher_class: type, *arguments: object) -> list:
    """Have the runner make its launchers as launcher_class(workers, *arguments, lock_fd); return
    the list they are kept in, for the test to look at."""
    launchers = []

    def launcher(options, lock_fd=None):
        launchers.append(launcher_class(options.workers, *arguments, lock_fd))
        return launchers[-1]

    monkeypatch.setattr(runner, "make_launcher", launcher)
    return launchers


class CtrlCAgainWhileStopping(runner.LocalLauncher):
    """The local launcher, except that Ctrl-C reaches the runner as it starts a run, and twice
    more as it stops the runs in flight (a second Ctrl-C, or `timeout -s INT` signalling the
    whole process group)."""

    def __init__(self, workers: int | None, lock_fd: int | None = None) -> None:
        super().__init__(workers, lock_fd)
        self.started: list[subprocess.Popen] = []

    def start(self, run_dir: Path, attempt: int) -> subprocess.Popen:
        self.started.append(super().start(run_dir, attempt))
        signal.raise_signal(signal.SIGINT)
        return self.started[-1]

    def stop(self, handles: list[subprocess.Popen]) -> None:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        super().stop(handles)


def test_ctrl_c_again_while_the_matrix_stops_still_ends_marks_and_counts_every_run(
    tmp_path, monkeypatch, capfd
):
    """A second Ctrl-C in the cleanup cut it short: no summary, the run in flight left without
    its error.txt (so the report called it "no record"), its worker running on."""
    launchers = use_launcher(monkeypatch, CtrlCAgainWhileStopping)
    results = tmp_path / "results"
    try:
        assert main(command(spec_file(tmp_path, seeds=(0,)), results)) == 130
    finally:
        for worker in launchers[0].started if launchers else []:
            alive = worker.poll() is None
            worker.kill()
            worker.wait()
            assert not alive, "the run's worker was left running"
    captured = capfd.readouterr()
    out = " ".join(captured.out.split())
    assert "0 runs done now, 0 finished before, 0 failed, 1 interrupted, 0 not started" in out
    assert "to resume, run the same `gameon bench run` again" in out
    assert "already stopping: the runs in flight are ended and marked interrupted" in captured.err
    text = (results / "online__Reach__fixed__ppo__s0" / "error.txt").read_text()
    assert "interrupted: Ctrl-C stopped the bench run while it ran" in text
    assert runs.was_interrupted(text)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_record_of_another_budget_is_refused_neither_skipped_nor_run_over(
    tmp_path, capsys
) -> None:
    """As after `gameon experiment --iterations 3 --run-dir RESULTS/RUN` on a matrix of 2: the
    run was skipped as finished and the report pooled it with the others' budget."""
    from gameon.baselines import ppo

    spec = spec_file(tmp_path, seeds=(0,))
    results = tmp_path / "results"
    assert main(command(spec, results)) == 0
    (run,) = expand(load_spec(spec, check=False))
    path = results / run.run_id / RECORD_FILE
    data = json.loads(path.read_text())
    data["budget"]["total_timesteps"] = 512
    path.write_text(json.dumps(data))
    assert load_record(path).budget["total_timesteps"] == 512
    assert not runs.is_complete(run, path.parent)
    capsys.readouterr()

    assert main(command(spec, results)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before the plan line, like another matrix's folder
    assert (
        f"{path.parent} holds a record of {run.run_id} that is not this matrix's run "
        "(total_timesteps 512, not 256)" in " ".join(captured.err.split())
    )
    assert json.loads(path.read_text()) == data  # kept as it was
    shutil.move(path.parent, tmp_path / "extended")  # as the message says: then it runs here
    assert plan_line(load_spec(spec, check=False), results, RunnerOptions(), load=0.0).startswith(
        "tiny: 1 run to do, "
    )
    defaults = dataclasses.replace(run, budget={"total_timesteps": 256})  # the rest: Args'
    assert runs.run_budget(defaults) == {
        "total_timesteps": 256,
        "eval_every": ppo.Args.eval_every,
        "num_envs": ppo.Args.num_envs,
    }


def test_a_failed_run_waiting_for_its_retry_is_marked_interrupted_with_its_failure_kept(
    tmp_path,
) -> None:
    (run,) = expand(load_spec(spec_file(tmp_path, seeds=(0,)), check=False))
    run_dir = tmp_path / run.run_id
    runs.prepare(run, run_dir)
    runs.write_error(run_dir, "Traceback ...\nRuntimeError: boom")
    waiting = deque([(run, 2, ["attempt 1: RuntimeError: boom"])])
    outcome = runner.MatrixResult(tmp_path)
    stopped = runner.stop_runs(FailsAtOnce(1), [], waiting, tmp_path, "SIGTERM", outcome)
    assert stopped == [run.run_id]
    text = (run_dir / "error.txt").read_text()
    assert text.startswith("Traceback ...\nRuntimeError: boom\n\n")
    assert f"{run.run_id} interrupted: SIGTERM stopped the bench run before retry 2" in text
    assert runs.was_interrupted(text)
    runs.mark_interrupted(run_dir, "a second stop")  # already interrupted: left as it is
    assert (run_dir / "error.txt").read_text() == text


def test_what_stopped_the_matrix_is_named() -> None:
    assert runner.stop_cause(KeyboardInterrupt()) == "Ctrl-C"
    assert runner.stop_cause(SystemExit(128 + signal.SIGTERM)) == "SIGTERM"
    assert runner.stop_cause(runner.ClusterLost("h:1", 10)) == "the lost Ray cluster"
    assert runner.stop_cause(RuntimeError("bug")) == "RuntimeError in the runner"


class LosesOneRunsNode(runner.LocalLauncher):
    """The local launcher, except that the first attempt of the `__s1` run is lost the way a
    dead Ray node reports it: its process gone, a Ray error as the reason."""

    def __init__(self, workers: int | None, lock_fd: int | None = None) -> None:
        super().__init__(workers, lock_fd)
        self.lost: list[str] = []

    def poll(self, handle: subprocess.Popen) -> tuple[int, str] | None:
        run_dir = Path(handle.args[-1])
        losing = run_dir.name.endswith("__s1") and not self.lost and handle.poll() is None
        if losing and "(attempt 1)" in (run_dir / "run.log").read_text():
            handle.kill()
            handle.wait()
            self.lost.append(run_dir.name)
            return -1, "lost with the Ray node it ran on (NodeDiedError)\nnode 1 died"
        return super().poll(handle)


def test_a_run_lost_with_its_node_is_retried_and_counted(tmp_path, monkeypatch, capsys):
    """The scheduler's side of a lost Ray node, without a cluster (tests/test_ray_cluster.py
    kills a real node, under the slow marker)."""
    launchers = use_launcher(monkeypatch, LosesOneRunsNode)
    results = tmp_path / "results"
    assert main(command(spec_file(tmp_path, seeds=range(3)), results, "--workers", "2")) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert launchers[0].lost == ["online__Reach__fixed__ppo__s1"]
    assert "retrying online__Reach__fixed__ppo__s1: lost with the Ray node" in out
    assert "3 runs done now, 0 finished before, 0 failed, 1 retried" in out
    found = records(results)
    assert sorted(found) == [f"online__Reach__fixed__ppo__s{seed}" for seed in range(3)]
    for run_id, path in found.items():
        assert load_record(path).run_id == run_id
        log = (path.parent / "run.log").read_text()
        assert log.count("final success") == 1
        assert ("(attempt 2)" in log) == (run_id == "online__Reach__fixed__ppo__s1")


class LosesTheHead(runner.LocalLauncher):
    """The local launcher, except that its cluster's head stops answering once a run has
    finished while another is still in flight."""

    def __init__(self, workers: int | None, results: Path, lock_fd: int | None = None) -> None:
        super().__init__(workers, lock_fd)
        self.results = results
        self.started: list[subprocess.Popen] = []

    def start(self, run_dir: Path, attempt: int) -> subprocess.Popen:
        self.started.append(super().start(run_dir, attempt))
        return self.started[-1]

    def check(self) -> None:
        in_flight = [handle for handle in self.started if handle.poll() is None]
        if records(self.results) and in_flight:
            raise runner.ClusterLost("127.0.0.1:6379", runner.HEAD_LOST_SECONDS)


def test_a_lost_head_ends_the_matrix_with_a_clear_message_and_a_rerun_resumes(
    tmp_path, monkeypatch, capsys
):
    """The scheduler's side of a lost Ray head, without a cluster (tests/test_ray_cluster.py
    kills a real head, under the slow marker)."""
    results = tmp_path / "results"
    spec = spec_file(tmp_path, seeds=range(3))
    launchers = use_launcher(monkeypatch, LosesTheHead, results)
    assert main(command(spec, results, "--workers", "2")) == 1
    said = capsys.readouterr()
    last = said.err.strip().splitlines()[-1]
    assert last.startswith("gameon bench run: lost the Ray cluster at 127.0.0.1:6379")
    assert last.endswith("run the same command again to resume")
    assert all(handle.poll() is not None for handle in launchers[0].started)
    first = {run_id: path.read_bytes() for run_id, path in records(results).items()}
    assert 1 <= len(first) < 3
    assert "stopped by the lost Ray cluster: " in said.out
    unfinished = load_runs(results)[1]  # the runs stopped in flight, if any had not ended
    assert all(s.reason.startswith("interrupted (") for s in unfinished), unfinished
    assert f"{len(unfinished)} interrupted" in said.out

    monkeypatch.undo()
    assert main(command(spec, results, "--workers", "2")) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{plural(len(first), 'run')} already finished in {results}: skipped" in out
    assert (
        f"{plural(3 - len(first), 'run')} done now, {len(first)} finished before, 0 failed" in out
    )
    found = records(results)
    assert len(found) == 3
    assert {run_id: found[run_id].read_bytes() for run_id in first} == first
    for run_id, path in found.items():
        assert load_record(path).run_id == run_id
        assert "final success" in (path.parent / "run.log").read_text()


class HeadLostAtAFailure(runner.LocalLauncher):
    """The local launcher, except that the check after a failed attempt finds the head gone."""

    def check_after_failure(self) -> None:
        raise runner.ClusterLost("127.0.0.1:6379", runner.HEAD_LOST_SECONDS)


def test_a_run_whose_failure_finds_the_head_lost_is_counted_interrupted(
    tmp_path, monkeypatch, capsys
):
    """The failed attempt was the cluster's: the run was dropped from the count (neither
    failed, interrupted nor not started) and left without a word in its error.txt."""
    monkeypatch.setattr(runner, "make_launcher", lambda o, lock_fd=None: HeadLostAtAFailure(1))
    monkeypatch.setenv("GAMEON_BENCH_FAULT", "raise:__s0")
    results = tmp_path / "results"
    assert main(command(spec_file(tmp_path, seeds=(0,)), results)) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "stopped by the lost Ray cluster: 0 runs done now, 0 finished before, 0 failed, " in out
    assert "1 interrupted, 0 not started" in out
    text = (results / "online__Reach__fixed__ppo__s0" / "error.txt").read_text()
    assert "interrupted: the lost Ray cluster stopped the bench run while it ran" in text


def test_a_failed_ray_attempt_whose_head_is_silent_ends_the_matrix_as_a_lost_cluster(
    monkeypatch,
) -> None:
    """Runs in flight may fail before the periodic check notices the head is gone; such a
    failure is the cluster's, so it must not end the matrix as failed runs."""
    monkeypatch.setattr(runner, "HEAD_LOST_SECONDS", 0.3)
    monkeypatch.setattr(runner, "HEAD_CHECK_SECONDS", 0.05)
    launcher = object.__new__(runner.RayLauncher)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        launcher.head = f"127.0.0.1:{listening.getsockname()[1]}"
        launcher.check_after_failure()  # the head answers: the failure is the run's own
    with pytest.raises(runner.ClusterLost, match="lost the Ray cluster at 127.0.0.1:"):
        launcher.check_after_failure()


def namespace_problem() -> str | None:
    """Why the Ray test cannot run here, or None."""
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed (pip install 'gameon-rl[ray]')"
    if shutil.which("unshare") is None:
        return "no unshare command to make a private network namespace"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -n is not permitted here: {probe.stderr.strip()}"
    return None


@pytest.mark.skipif(namespace_problem() is not None, reason=str(namespace_problem()))
def test_ray_runner_on_a_local_cluster_in_a_private_network_namespace(tmp_path):
    results = tmp_path / "results"
    args = " ".join(command(spec_file(tmp_path), results, "--runner", "ray", "--workers", "2"))
    script = f"ip link set lo up && {sys.executable} -m gameon.benchmark.commands {args}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "local Ray cluster (127.0.0.1), 2 CPUs" in done.stdout
    # Ray's own start-up notes came between the plan line and the progress
    assert "Started a local Ray instance" not in done.stderr
    assert "Token authentication is enabled" not in done.stderr
    found = records(results)
    assert sorted(found) == ["online__Reach__fixed__ppo__s0", "online__Reach__fixed__ppo__s1"]
    for path in found.values():
        load_record(path)


PIPELINE = """
name = "pipeline"
description = "the smoke preset's pipeline, fewer runs"
seeds = [0]
eval_episodes_per_skill = 1
curricula = [{ name = "vlm", backend = "auto" }]

[online]
learners = ["ppo"]
env_ids = ["GameOn/Reach-v0"]
budget = { total_timesteps = 256, eval_every = 128, num_envs = 2 }
ppo = { num_steps = 64, num_minibatches = 4, update_epochs = 1 }

[collect]
learners = ["bc"]
env_ids = ["GameOn/Stack-v0"]
budget = { iterations = 1, episodes_per_iteration = 2, seed_episodes = 4, num_updates = 50 }
settings = { collector = "demo", target_eval_episodes = 1 }
"""
PIPELINE_CONTROLS = """
name = "pipeline"
description = "the smoke preset's controls"
seeds = [0]
eval_episodes_per_skill = 1
curricula = ["positive_control", "negative_control"]

[collect]
learners = ["bc"]
env_ids = ["GameOn/Stack-v0"]
budget = { iterations = 1, episodes_per_iteration = 2, seed_episodes = 4, num_updates = 50 }
settings = { collector = "demo", target_eval_episodes = 1 }
"""


def bench_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec_text: str, *options: str):
    """`python -m gameon.cli bench run SPEC` in a child process without a model key."""
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    results = tmp_path / "pipeline"
    spec = tmp_path / "pipeline.toml"
    spec.write_text(spec_text)
    process = subprocess.run(
        [sys.executable, "-m", "gameon.cli", "bench", "run", str(spec), "--results", str(results)]
        + list(options),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]
    return process, results


def test_gameon_bench_run_end_to_end_with_the_vlm_stand_in_under_both_protocols(
    tmp_path, monkeypatch
):
    """A default twin of the smoke preset's test (which runs under -m slow), with its report
    twin below: `gameon bench run` through both protocols with the vlm stand-in, labelled."""
    process, results = bench_run(tmp_path, monkeypatch, PIPELINE, "--no-report")
    assert "rules" in process.stdout and "vlm[rules]" in process.stdout
    found = {run_id: load_record(path) for run_id, path in records(results).items()}
    labels = {(r.protocol, r.learner, r.curriculum_label) for r in found.values()}
    assert labels == {("online", "ppo", "vlm[rules]"), ("collect", "bc", "vlm[rules]")}
    assert all(r.vlm.calls > 0 for r in found.values())
    collected = [r for r in found.values() if r.protocol == "collect"]
    assert all(r.protocol_version == 2 and len(r.target_evaluations) == 2 for r in collected)


def test_gameon_bench_run_end_to_end_with_both_controls_and_the_report(tmp_path, monkeypatch):
    """The other default twin of the smoke preset's test: both controls under collect v2, then
    the report with its pipeline-check banner and its Controls line."""
    process, results = bench_run(tmp_path, monkeypatch, PIPELINE_CONTROLS)
    found = {run_id: load_record(path) for run_id, path in records(results).items()}
    labels = {(r.protocol, r.learner, r.curriculum_label) for r in found.values()}
    assert labels == {("collect", "bc", "positive_control"), ("collect", "bc", "negative_control")}
    assert all(r.protocol_version == 2 and len(r.target_evaluations) == 2 for r in found.values())
    report = (results / "report.md").read_text()
    assert report.startswith("# Benchmark report (pipeline: ")
    assert "> **Pipeline check: these numbers rank nothing.**" in report
    assert "## Controls" in report and "positive control" in report
    assert str(results / "report.md") in " ".join(process.stdout.split())


@pytest.mark.slow
def test_the_smoke_preset_runs_end_to_end_through_gameon(tmp_path, monkeypatch):
    """The README's main command: every curriculum under both protocols, records, report (about
    2 minutes; its default twins are the two tests above)."""
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    results = tmp_path / "smoke"
    process = subprocess.run(
        [sys.executable, "-m", "gameon.cli", "bench", "run", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]
    assert "rules" in process.stdout and "vlm[rules]" in process.stdout
    found = {run_id: load_record(path) for run_id, path in records(results).items()}
    assert len(found) == 20
    labels = {(r.protocol, r.learner, r.curriculum_label) for r in found.values()}
    for protocol, learners in (("online", ("ppo", "sac")), ("collect", ("bc", "iql"))):
        for learner in learners:
            for label in ("fixed", "hand", "lp", "vlm[rules]"):
                assert (protocol, learner, label) in labels
    for learner in ("bc", "iql"):
        for label in ("positive_control", "negative_control"):
            assert ("collect", learner, label) in labels
    assert all(r.vlm.calls > 0 for r in found.values() if r.curriculum == "vlm")
    collected = [r for r in found.values() if r.protocol == "collect"]
    assert all(r.protocol_version == 2 and len(r.target_evaluations) == 2 for r in collected)
    report = (results / "report.md").read_text()
    assert report.startswith("# Benchmark report (smoke: ") and "pipeline check" in report[:200]
    assert report.count("| vlm[rules] |") == 6  # the main table (4) and the target table (2)
    assert "## Controls" in report
    assert str(results / "report.md") in process.stdout
