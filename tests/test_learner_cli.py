"""The learners' command lines (`python -m gameon.baselines.ppo|sac|bc|iql|datasets`): a bad
setting is one line naming its option and exit 2, as are inputs that do not fit each other
(before any run folder is made), and --help names the program and what --curriculum accepts."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tyro")
pytest.importorskip("minari")
pytest.importorskip("h5py", reason="Minari's HDF5 storage needs h5py (minari[hdf5])")

from gameon.baselines import bc, common, datasets, iql, ppo, sac  # noqa: E402
from gameon.policy import load_checkpoint  # noqa: E402

FAILED = "gameon/lift-failed-v0"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A datasets folder with one Lift episode of random actions (no successful segment)."""
    path = tmp_path_factory.mktemp("datasets")
    args = datasets.Args(
        env_id="GameOn/Lift-v0",
        dataset_id=FAILED,
        datasets_path=str(path),
        episodes_per_skill=1,
        failed_fraction=1.0,
        progress=False,
    )
    datasets.collect(args)
    return path


def run(module: str, *arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m gameon.baselines.{module} ARGUMENTS`, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", f"gameon.baselines.{module}", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("module", "arguments", "message"),
    [
        ("ppo", ["--total-timesteps", "0"], "total_timesteps must be >= 1, got 0"),
        ("ppo", ["--env-id", "Nope-v0"], "unknown env id 'Nope-v0'"),
        (
            "ppo",
            ["--curriculum", "bogus"],
            "unknown curriculum 'bogus'; accepted: fixed, hand, lp, vlm, positive_control (",
        ),
        ("sac", ["--curriculum", "negative_control"], "curriculum 'negative_control' cannot train"),
        ("sac", ["--demo-ratio", "1.5"], "demo_ratio must be in (0, 1), got 1.5"),
        # refused by torch or numpy only once the run folder was made, with a traceback
        ("ppo", ["--learning-rate", "-1"], "learning_rate must be a finite number > 0, got -1.0"),
        ("sac", ["--alpha", "0"], "alpha must be a finite number > 0, got 0.0"),
        ("sac", ["--seed", "-1"], "seed must be in 0 .. 2**32 - 1 = 4294967295, got -1"),
        ("bc", ["--dataset-id", FAILED, "--learning-rate", "nan"], "learning_rate must be >= 0"),
        ("iql", ["--dataset-id", FAILED, "--beta", "nan"], "beta must be >= 0 (0: plain BC)"),
        ("bc", ["--dataset-id", "missing/x-v0"], "no dataset missing/x-v0: it is not under"),
        ("iql", ["--dataset-id", FAILED, "--expectile", "1.5"], "expectile must be in (0, 1)"),
        # PPO trained a linear actor; SAC, BC and IQL refuse it
        ("ppo", ["--hidden"], "hidden must be one or more widths >= 1, got ()"),
        # exp(100) overflows float32: every action NaN, a traceback from inside the env
        ("ppo", ["--init-log-std", "100"], "init_log_std must be a number in [-20, 20] (the log"),
        ("bc", ["--dataset-id", FAILED, "--print-every", "-1"], "print_every must be >= 0 (0: no"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(
    module: str, arguments: list[str], message: str, root: Path, tmp_path: Path
) -> None:
    if module in ("bc", "iql"):
        arguments = [*arguments, "--datasets-path", str(root)]
    result = run(module, *arguments, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"python -m gameon.baselines.{module}: error: {message}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # no run folder, no datasets folder


def test_the_error_line_names_the_options_of_the_fields_it_names(tmp_path: Path) -> None:
    result = run("sac", "--env-id", "GameOn/Reach-v0", "--total-timesteps", "512", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "total_timesteps (512) must exceed learning_starts (5000)" in result.stderr
    assert result.stderr.endswith("(see --total-timesteps, --learning-starts in --help)\n")


def test_a_run_dir_that_holds_a_run_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    run_dir = tmp_path / "earlier"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes(b"an earlier run's policy")
    result = run("ppo", "--env-id", "GameOn/Reach-v0", "--run-dir", str(run_dir), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"run_dir {run_dir} holds a run already (checkpoint.pt)" in result.stderr
    assert [p.name for p in run_dir.iterdir()] == ["checkpoint.pt"]
    assert (run_dir / "checkpoint.pt").read_bytes() == b"an earlier run's policy"


def tiny_args(module: str, root: Path, run_dir: Path) -> object:
    """A learner's Args with a budget of seconds, so that a run that is not refused ends soon."""
    if module == "ppo":
        return ppo.Args(
            env_id="GameOn/Reach-v0",
            total_timesteps=64,
            num_envs=1,
            num_steps=64,
            num_minibatches=1,
            update_epochs=1,
            eval_episodes_per_skill=1,
            run_dir=str(run_dir),
        )
    if module == "sac":
        return sac.Args(
            env_id="GameOn/Reach-v0",
            total_timesteps=64,
            num_envs=1,
            learning_starts=32,
            batch_size=16,
            eval_episodes_per_skill=1,
            run_dir=str(run_dir),
        )
    learner = bc if module == "bc" else iql
    return learner.Args(
        dataset_id=FAILED,
        datasets_path=str(root),
        num_updates=2,
        log_every=1,
        eval_episodes_per_skill=1,
        run_dir=str(run_dir),
    )


@pytest.mark.parametrize("module", ["ppo", "sac", "bc", "iql"])
def test_train_called_from_python_refuses_a_run_dir_that_holds_a_run(
    module: str, root: Path, tmp_path: Path
) -> None:
    """Not only the command line: every learner's `train` refuses a folder holding an earlier
    run, before it writes anything, so that no run's files are ever replaced."""
    learner = {"ppo": ppo, "sac": sac, "bc": bc, "iql": iql}[module]
    run_dir = tmp_path / "earlier"
    run_dir.mkdir()
    earlier = {"checkpoint.pt": b"an earlier run's policy", "summary.json": b"{}"}
    for name, content in earlier.items():
        (run_dir / name).write_bytes(content)
    with pytest.raises(ValueError) as refused:
        learner.train(tiny_args(module, root, run_dir))
    assert str(refused.value).startswith(
        f"run_dir {run_dir} holds a run already (checkpoint.pt, summary.json)"
    )
    assert "give another folder, or move that one away" in str(refused.value)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == earlier


@pytest.mark.parametrize("module", ["ppo", "sac", "bc", "iql"])
def test_a_run_dir_with_an_earlier_run_s_tensorboard_logs_is_refused_and_left_as_it_was(
    module: str, root: Path, tmp_path: Path
) -> None:
    """A run stopped before its first evaluation leaves only its logs: a new run there would add
    its own events file beside them, and TensorBoard would show the two runs' curves as one."""
    learner = {"ppo": ppo, "sac": sac, "bc": bc, "iql": iql}[module]
    run_dir = tmp_path / "stopped"
    run_dir.mkdir()
    earlier = {"events.out.tfevents.1700000000.host.1.0": b"an earlier run's curves"}
    for name, content in earlier.items():
        (run_dir / name).write_bytes(content)
    with pytest.raises(ValueError) as refused:
        learner.train(tiny_args(module, root, run_dir))
    assert str(refused.value) == (
        f"run_dir {run_dir} holds the TensorBoard logs of an earlier run "
        "(events.out.tfevents.1700000000.host.1.0), which TensorBoard would show mixed with a new "
        "run's; give another folder, or move that one away (or delete it) first"
    )
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == earlier


def test_tensorboard_logs_in_the_run_dir_are_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("events.out.tfevents.1.host.1.0", "events.out.tfevents.2.host.2.0"):
        (tmp_path / name).write_bytes(b"")
    argv = ["ppo", "--env-id", "GameOn/Reach-v0", "--run-dir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        common.parse_cli(ppo.Args, "python -m gameon.baselines.ppo")
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"python -m gameon.baselines.ppo: error: run_dir {tmp_path} holds the TensorBoard logs of "
        "an earlier run (events.out.tfevents.1.host.1.0 and 1 more), "
    )
    assert error.count("\n") == 1 and error.endswith("(see --run-dir in --help)\n")


PAIRED = ("checkpoint.pt", "eval.json")
"""The files each evaluation writes together (online also curriculum.json)."""


@pytest.mark.parametrize(
    ("module", "budget", "step"),
    [
        ("ppo", {"total_timesteps": 192, "eval_every": 64}, 128),
        ("sac", {"total_timesteps": 96, "eval_every": 32}, 64),
        ("bc", {"num_updates": 3, "eval_every": 1}, 2),
        ("iql", {"num_updates": 3, "eval_every": 1}, 2),
    ],
)
def test_ctrl_c_between_an_evaluation_s_files_leaves_them_from_that_evaluation(
    module: str,
    budget: dict,
    step: int,
    root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C just after the first file of the second of three evaluations is written: every
    learner writes the other too before it stops, and says so. checkpoint.pt came from the second
    and eval.json from the first (BC, IQL), or the other way round (PPO, SAC)."""
    learner = {"ppo": ppo, "sac": sac, "bc": bc, "iql": iql}[module]
    writes = {"save_checkpoint": common.save_checkpoint, "write_json": common.write_json}
    written: list[str] = []

    def interrupting(name: str):
        def write(path: Path, *rest: object, **options: object) -> Path:
            done = writes[name](path, *rest, **options)
            if Path(path).name in PAIRED:
                written.append(Path(path).name)
                if len(written) == 3:
                    signal.raise_signal(signal.SIGINT)
            return done

        return write

    for name in writes:
        monkeypatch.setattr(common, name, interrupting(name))
    args = tiny_args(module, root, tmp_path / "run")
    for name, value in budget.items():
        setattr(args, name, value)
    with pytest.raises(KeyboardInterrupt):
        learner.train(args)
    counter = "global_step" if module in ("ppo", "sac") else "update"
    evaluation = json.loads((tmp_path / "run" / "eval.json").read_text())
    _, _, checkpoint = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert (evaluation[counter], checkpoint["extra"][counter]) == (step, step)
    unit = "step" if module in ("ppo", "sac") else "update"
    said = f"the checkpoint.pt and eval.json of the evaluation at {unit} {step}, but no summary"
    assert said in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_run_dir_of_logs_only_is_accepted(root: Path, tmp_path: Path) -> None:
    """A folder without a run's files (a log, say) is not an earlier run: the learner uses it."""
    run_dir = tmp_path / "logs"
    run_dir.mkdir()
    (run_dir / "train.log").write_text("a log")
    summary = bc.train(tiny_args("bc", root, run_dir))
    assert Path(summary["checkpoint"]) == run_dir / "checkpoint.pt"
    assert (run_dir / "train.log").read_text() == "a log"


def test_usage_message_adds_only_the_options_of_named_fields() -> None:
    crowded = ValueError("num_minibatches (9) must be <=\n num_envs * num_steps (8)")
    assert common.usage_message(crowded, ppo.Args) == (
        "num_minibatches (9) must be <= num_envs * num_steps (8) "
        "(see --num-minibatches, --num-envs, --num-steps in --help)"
    )
    assert common.usage_message(ValueError("unknown env id 'x'"), ppo.Args) == (
        "unknown env id 'x' (see --help)"
    )


def test_inputs_that_do_not_fit_are_one_line_and_leave_no_run_folder(
    root: Path, tmp_path: Path
) -> None:
    """Refused once the dataset is read (here: --success-only on data without a success), before
    the run folder is made."""
    result = run(
        "bc", "--dataset-id", FAILED, "--datasets-path", str(root), "--success-only", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"python -m gameon.baselines.bc: error: dataset {FAILED} has no successful segment"
    )
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module", ["ppo", "sac"])
def test_coded_skills_that_cannot_be_read_are_one_line_and_leave_no_run_folder(
    module: str, tmp_path: Path
) -> None:
    result = run(module, "--coded-skills", "missing.json", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"python -m gameon.baselines.{module}: error: coded_skills missing.json: "
    )
    assert "no skill library at missing.json" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
@pytest.mark.parametrize("module", ["ppo", "sac"])
def test_track_without_wandb_is_one_line_and_leaves_no_run_folder(
    module: str, tmp_path: Path
) -> None:
    result = run(module, "--track", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"python -m gameon.baselines.{module}: error: track needs Weights & Biases"
    )
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module", ["ppo", "sac"])
def test_curriculum_help_names_the_controls(module: str) -> None:
    result = run(module, "--help")
    assert result.returncode == 0, result.stderr
    assert "positive_control" in result.stdout and "negative_control" in result.stdout


def test_datasets_help_names_the_program_and_what_it_does() -> None:
    result = run("datasets", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m gameon.baselines.datasets [-h]")
    assert "Collect scripted-expert episodes" in result.stdout


def test_ctrl_c_on_the_command_line_is_a_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a traceback: the learner said what its folder keeps, the command line says how it
    ended (130, as a shell reports SIGINT)."""

    def interrupted(args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sys, "argv", ["ppo", "--env-id", "GameOn/Reach-v0"])
    try:
        with pytest.raises(SystemExit) as exit_:
            common.run_cli(interrupted, ppo.Args, "python -m gameon.baselines.ppo")
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C left run_cli as a KeyboardInterrupt (a traceback)")
    assert exit_.value.code == 130
    assert capsys.readouterr().err == "python -m gameon.baselines.ppo: interrupted\n"


def test_a_model_the_server_does_not_know_stops_the_learner_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused at the first consultation (a misspelt model): every later one would be too, so
    the run stops, naming what to check, instead of training under lp as vlm[openai:...]."""
    from fake_http import Scripted, ScriptedServer

    server = ScriptedServer("/v1/chat/completions")
    server.script(Scripted(404, json.dumps({"error": {"code": 404, "message": "no llava"}})))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    arguments = ["--curriculum", "vlm", "--vlm-backend", "openai", "--vlm-model", "llava"]
    arguments += ["--vlm-base-url", f"{server.url}/v1", "--total-timesteps", "2048"]
    monkeypatch.setattr(sys, "argv", ["ppo", *arguments, "--run-dir", str(tmp_path / "run")])
    prog = "python -m gameon.baselines.ppo"
    try:
        with pytest.raises(SystemExit) as exit_:
            common.run_cli(ppo.train, ppo.Args, prog, ppo.check_args)
    finally:
        server.close()
    assert exit_.value.code == 2 and len(server.requests) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"{prog}: error: openai call for module 'propose' failed:")
    assert "no llava (no such model here: check --vlm-model" in error
    assert error.endswith("start it again with a new --run-dir\n") and error.count("\n") == 1


@pytest.mark.parametrize("module", ["bc", "iql"])
def test_ctrl_c_of_an_offline_learner_says_what_it_kept_and_its_folder_is_not_reused(
    module: str,
    root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As PPO and SAC: the learner's line on what its folder keeps (its last evaluation's
    checkpoint.pt and eval.json), then `PROG: interrupted` and exit 130; the folder holds a run
    now, so the same command is refused and leaves it as it was."""
    learner = bc if module == "bc" else iql
    check = iql.check_args if module == "iql" else common.check_offline_args
    prog = f"python -m gameon.baselines.{module}"
    progress = common.OfflineRun.print_progress

    def interrupted_in_update_3(run: common.OfflineRun, update: int, *rest: object) -> None:
        if update == 3:
            raise KeyboardInterrupt
        progress(run, update, *rest)

    monkeypatch.setattr(common.OfflineRun, "print_progress", interrupted_in_update_3)
    run_dir = tmp_path / "run"
    arguments = ["--dataset-id", FAILED, "--datasets-path", str(root), "--run-dir", str(run_dir)]
    budget = ["--num-updates", "4", "--eval-every", "2", "--eval-episodes-per-skill", "1"]
    monkeypatch.setattr(sys, "argv", [module, *arguments, *budget, "--hidden", "16"])
    with pytest.raises(SystemExit) as exit_:
        common.run_cli(learner.train, learner.Args, prog, check)
    assert exit_.value.code == 130
    assert capsys.readouterr().err == (
        f"interrupted at update 3 of 4: {run_dir} keeps its TensorBoard logs and the "
        "checkpoint.pt and eval.json of the evaluation at update 2, but no summary.json; a run "
        f"does not resume, so start it again with a new --run-dir\n{prog}: interrupted\n"
    )
    kept = {path.name: path.read_bytes() for path in run_dir.iterdir()}
    with pytest.raises(SystemExit) as exit_:
        common.run_cli(learner.train, learner.Args, prog, check)
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert f"run_dir {run_dir} holds a run already (checkpoint.pt, eval.json)" in error
    assert {path.name: path.read_bytes() for path in run_dir.iterdir()} == kept


def test_runs_given_no_run_dir_in_the_same_second_get_folders_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of a sweep started together shared runs/ppo__...__{second}: one checkpoint and
    summary were lost and TensorBoard showed both curves as one run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common.time, "time", lambda: 1796316763.5)
    first = common.default_run_dir("ppo", "GameOn/Reach-v0", 1)
    second = common.default_run_dir("ppo", "GameOn/Reach-v0", 1)
    assert first == Path("runs/ppo__GameOn_Reach-v0__1__1796316763")
    assert second == Path("runs/ppo__GameOn_Reach-v0__1__1796316763_2")
    assert first.is_dir() and second.is_dir()


@pytest.mark.parametrize(
    ("module", "where"),
    [("ppo", ["--run-dir", "a-file/run"]), ("bc", ["--run-dir", "a-file/run"]), ("sac", [])],
)
def test_a_run_folder_that_cannot_be_written_is_one_line_and_exit_2(
    module: str, where: list[str], root: Path, tmp_path: Path
) -> None:
    """A run folder under a file (or, given no --run-dir, a working folder where runs/ cannot be
    made) was a NotADirectoryError or PermissionError traceback; an existing folder TensorBoard
    could not write printed it twice from the writer's thread."""
    (tmp_path / "a-file").write_text("not a folder")
    arguments = ["--total-timesteps", "600", "--learning-starts", "100"] if module == "sac" else []
    if module == "bc":
        arguments = ["--dataset-id", FAILED, "--datasets-path", str(root)]
    if not where:
        (tmp_path / "runs").write_text("a file where runs/ goes")
    result = run(module, *arguments, *where, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    folder = "a-file/run" if where else "runs"
    assert (
        f"python -m gameon.baselines.{module}: error: cannot write the run folder {folder} ("
        in (result.stderr)
    )
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_training_that_diverges_stops_in_one_line_saying_what_the_folder_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --learning-rate 100 PPO's weights became NaN and the next rollout ended in a
    WorkerError traceback from inside the env ("action must be finite"), the folder left with
    its TensorBoard logs and no word about them."""
    prog = "python -m gameon.baselines.ppo"
    run_dir = tmp_path / "run"
    arguments = ["--total-timesteps", "1024", "--num-steps", "256", "--learning-rate", "100"]
    arguments += ["--no-anneal-lr", "--eval-episodes-per-skill", "1", "--run-dir", str(run_dir)]
    monkeypatch.setattr(sys, "argv", ["ppo", *arguments])
    with pytest.raises(SystemExit) as exit_:
        common.run_cli(ppo.train, ppo.Args, prog, ppo.check_args)
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "stopped (training diverged) at env step 512 of 1024: " in err
    assert f"{prog}: error: training diverged by env step 512: the policy's weights are no " in err
    assert "Traceback" not in err and "WorkerError" not in err


def test_a_dataset_holding_a_nan_is_refused_before_training(root: Path, tmp_path: Path) -> None:
    """One NaN in one observation poisoned the normaliser: BC and IQL trained their whole budget
    on NaN losses, then failed inside the env on a NaN action."""
    import h5py

    shutil.copytree(root, tmp_path / "data")
    path = tmp_path / "data" / FAILED / "data" / "main_data.hdf5"
    with h5py.File(path, "a") as file:
        state = file["episode_0/observations/state"]
        values = state[:]
        values[3, 0] = float("nan")
        state[...] = values
    result = run(
        "bc", "--dataset-id", FAILED, "--datasets-path", str(tmp_path / "data"), cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert "episode 0 holds observations['state'] that are not finite numbers" in result.stderr
    assert "Traceback" not in result.stderr
