"""The `gameon` command line: listing the envs, recording a demo, one-line usage errors, help,
and the one line that names a missing optional extra."""

import importlib.abc
import os
import re
import runpy
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gameon.benchmark.commands import COMMANDS as HARNESS_USAGE
from gameon.cli import main
from gameon.envs import ENV_SKILLS
from gameon.extras import EXTRAS, missing_extra

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Run `gameon ARGS` in a fresh interpreter, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "gameon.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_envs_shows_every_id_whole_on_an_80_column_terminal(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unwrapped example column squeezed the ids to `Gam…` below ~120 columns."""
    import rich.console

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(rich.console.Console, "is_terminal", property(lambda self: True))
    main(["envs"])
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # its bold header
    assert max(len(line) for line in out.splitlines()) <= 80
    for env_id in ENV_SKILLS:
        assert f" {env_id} " in out


def test_envs_lists_every_id_with_its_max_steps(capsys: pytest.CaptureFixture) -> None:
    main(["envs"])
    out = capsys.readouterr().out
    for env_id, (skills, max_steps) in ENV_SKILLS.items():
        line = next(line for line in out.splitlines() if env_id in line)
        assert str(max_steps) in line
        assert skills[0] in line
    assert "stack the" in out and "build a tower of" in out


def test_envs_runs_as_a_command() -> None:
    result = run_cli("envs")
    assert result.returncode == 0, result.stderr
    assert all(env_id in result.stdout for env_id in ENV_SKILLS)


def test_unknown_env_id_exits_2_naming_accepted_ids(tmp_path: Path) -> None:
    result = run_cli("demo", "--env-id", "GameOn/Nope-v0", "--out", str(tmp_path / "x.mp4"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1
    assert "GameOn/Nope-v0" in message
    assert all(env_id in message for env_id in ENV_SKILLS)
    assert not (tmp_path / "x.mp4").exists()


def test_an_out_that_is_all_suffix_asks_for_a_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--out .mp4` said "unknown video suffix ''" (a dot file has no suffix)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--out", str(tmp_path / ".mp4")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"gameon: error: {str(tmp_path / '.mp4')!r} has no file name before its suffix; give "
        f"one, e.g. {str(tmp_path / 'demo.mp4')!r}\n"
    )


@pytest.mark.parametrize("out", ["demo.avi", "demo"])
def test_bad_video_suffix_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture, out: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--out", str(tmp_path / out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert ".mp4" in err and ".gif" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--seed", "-1"], "--seed must be at least 0, got -1"),
        (["--noise", "nan"], "--noise must be a number of at least 0, got nan"),
        (["--out", "{file}/x.gif"], "cannot write the video to '{file}/x.gif'"),
        (["--out", "{folder}"], "cannot write the video to '{folder}': it is a folder"),
        (["--out", "{plain}"], "cannot write the video to '{plain}': it is a folder"),
    ],
)
def test_bad_demo_values_exit_2_before_the_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture, flags: list[str], message: str
) -> None:
    """A folder named as the video (videos.mp4/) was found only by the rename after the episode,
    which raised a traceback."""
    file = tmp_path / "file"
    file.write_text("not a folder")
    folder = tmp_path / "videos.mp4"
    folder.mkdir()
    plain = tmp_path / "videos"  # no suffix: was called an unknown video suffix ''
    plain.mkdir()
    paths = {"file": file, "folder": folder, "plain": plain}
    args = ["demo", "--out", str(tmp_path / "x.gif"), *(f.format(**paths) for f in flags)]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message.format(**paths) in captured.err and len(captured.err.strip().splitlines()) == 1


def test_bad_instruction_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("gameon.envs.experts")
    args = ["demo", "--instruction", "juggle the red block", "--out", str(tmp_path / "x.gif")]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == (
        "gameon: error: cannot parse instruction 'juggle the red block'; accepted forms:"
    )
    assert "  lift: pick up the <colour> block" in lines
    assert "accepted colours: red, green, blue, yellow, purple" in lines


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_demo_writes_a_video(tmp_path: Path, capsys: pytest.CaptureFixture, suffix: str) -> None:
    pytest.importorskip("gameon.envs.experts")
    iio = pytest.importorskip("imageio.v3")
    if suffix == ".mp4":
        pytest.importorskip("imageio_ffmpeg")
    out = tmp_path / "sub" / f"demo{suffix}"
    main(
        [
            "demo",
            "--env-id", "GameOn/Reach-v0",
            "--instruction", "move the gripper above the red block",
            "--out", str(out),
            "--width", "96",
            "--height", "64",
        ]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert "move the gripper above the red block" in printed
    assert "success:     True" in printed
    assert str(out) in printed
    frames = np.asarray(iio.imread(out, index=None))
    assert frames.ndim == 4 and frames.shape[1:] == (64, 96, 3)
    assert len(frames) >= 11
    assert frames.std() > 0


def test_readme_tables_are_current() -> None:
    root = Path(__file__).resolve().parents[1]
    tables = runpy.run_path(str(root / "scripts" / "readme_tables.py"))
    readme = (root / "README.md").read_text().splitlines()
    generated = tables["envs_table"]() + tables["thresholds_table"]()
    for line in generated + tables["leaderboard_table"]():
        assert line in readme, f"stale README.md; see python scripts/readme_tables.py:\n{line}"


def test_experiment_help_lists_the_loop_options() -> None:
    result = run_cli("experiment", "--help")
    assert result.returncode == 0, result.stderr
    for option in ("--curriculum", "--learner", "--iterations", "--run-dir", "--stop-threshold"):
        assert option in result.stdout


def test_the_plan_line_says_counts_of_one_in_the_singular(tmp_path: Path) -> None:
    """It said "1 seed episodes, ... of 1 episodes ..., 1 updates each"."""
    from gameon.cli import plan_line
    from gameon.experimenter.loop import LoopConfig

    one = LoopConfig(iterations=1, episodes_per_iteration=1, seed_episodes=1, num_updates=1)
    said = "1 seed episode, then up to 1 iteration of 1 episode on GameOn/MultiSkill-v0, 1 update"
    assert f": {said} each; target" in plan_line(one, tmp_path)
    two = LoopConfig(iterations=2, episodes_per_iteration=2, seed_episodes=2, num_updates=2)
    said = (
        "2 seed episodes, then up to 2 iterations of 2 episodes on GameOn/MultiSkill-v0, 2 updates"
    )
    assert f": {said} each; target" in plan_line(two, tmp_path)


def test_experiment_vlm_gemini_without_key_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        args = ["--curriculum", "vlm", "--backend", "gemini", "--run-dir", str(run_dir)]
        main(["experiment", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "GEMINI_API_KEY" in err and "GOOGLE_API_KEY" in err and "--vlm-backend rules" in err
    assert err.startswith("gameon: error: no Gemini API key")  # not "cannot train for ..."
    assert not run_dir.exists()


def test_experiment_coding_skills_without_a_sandbox_stops_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither bwrap nor unshare
    run_dir = tmp_path / "run"
    args = ["--curriculum", "vlm", "--backend", "rules", "--vlm-code-skills"]
    with pytest.raises(SystemExit) as exit_info:
        main(["experiment", *args, "--run-dir", str(run_dir)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "vlm_code_skills needs a sandbox" in err and "apt-get install bubblewrap" in err
    assert not run_dir.exists()


def test_experiment_on_a_folder_another_run_is_working_in_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from gameon.atomic import file_lock
    from gameon.experimenter.loop import RUN_LOCK_FILE

    run_dir = tmp_path / "run"
    args = ["--curriculum", "fixed", "--run-dir", str(run_dir)]
    with file_lock(run_dir / RUN_LOCK_FILE), pytest.raises(SystemExit) as exit_info:
        main(["experiment", *args])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no plan line promising a run that is refused
    err = captured.err
    assert (
        err == f"gameon: error: {run_dir} is in use by another run (a `gameon experiment` or "
        "a benchmark worker in another process); wait for it to end, or give another --run-dir\n"
    )


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--chunk-length", "9999"], "--chunk-length"),
        (["--curriculum", "vlm", "--vlm-max-cost", "-1"], "--vlm-max-cost"),
    ],
)
def test_a_refused_experiment_setting_is_named_by_its_option(
    tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], option: str
) -> None:
    """The check's words are the config's field names (chunk_length), which the command line
    does not take: the line now closes with the option to change, as the learners' do."""
    pytest.importorskip("torch")
    with pytest.raises(SystemExit) as exit_info:
        main(["experiment", *args, "--run-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gameon: error: ") and err.endswith(f" (see {option} in --help)\n")
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_experiment_runs_and_prints_where_its_files_are(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("minari")
    pytest.importorskip("matplotlib")
    from gameon.records import load_record

    run_dir = tmp_path / "run"
    args = [
        "experiment",
        "--env-id", "GameOn/Reach-v0",
        "--practice-env-id", "GameOn/Reach-v0",
        "--curriculum", "fixed",
        "--iterations", "1",
        "--episodes-per-iteration", "2",
        "--seed-episodes", "2",
        "--num-updates", "100",
        "--eval-episodes-per-skill", "1",
        "--target-eval-episodes", "1",
        "--no-auto-stop",
        "--no-progress",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    main(args)
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (  # said at once, before the run: what it will do, and where
        "experiment: fixed curriculum, bc learner, learned collector, seed 0: 2 seed episodes, "
        "then 1 iteration of 2 episodes on GameOn/Reach-v0, 100 updates each; target "
        f"GameOn/Reach-v0; new run in {run_dir}"
    )
    # and at once how long it should take (it said nothing; the defaults take ~5 min)
    assert re.fullmatch(
        r"expected: about \d+ s on an idle 2-core machine(, longer when it is busy|; here, now "
        r"\(load [\d.]+ on \d+ CPUs\): about \d+ s)",
        out.splitlines()[1],
    )
    assert str(run_dir / "record.json") in out and str(run_dir / "curves.png") in out
    assert (run_dir / "record.json").is_file() and (run_dir / "curves.png").is_file()
    record = load_record(run_dir / "record.json")
    ranked = f"composed: success {record.target_success:.2f} over 1 episode (the ranked score)"
    assert f"target:   GameOn/Reach-v0 (reach), {ranked}" in out
    assert "target:   GameOn/Reach-v0 (reach), monolithic: success " in out
    with pytest.raises(SystemExit) as exit_info:  # same folder, another config: refused
        main([*args, "--seed", "1"])
    assert exit_info.value.code == 2
    assert "another config" in capsys.readouterr().err
    (tmp_path / "file").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--run-dir", str(tmp_path / "file")])
    assert exit_info.value.code == 2
    assert "is a file; give a folder" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine"


def test_gameon_routes_bench_and_leaderboard_to_the_harness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["leaderboard", "submit", str(tmp_path / "missing"), "--board", str(tmp_path)])
    assert exit_info.value.code == 1
    assert "missing: no such file or folder" in capsys.readouterr().out
    assert not (tmp_path / "leaderboard.json").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["leaderboard", "audit", "1", "--board", str(tmp_path / "no_board")])
    assert exit_info.value.code == 2
    assert "no leaderboard at" in capsys.readouterr().err and not (tmp_path / "no_board").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "rnu"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("gameon bench: unknown command 'rnu'\nusage:")


class _Hidden(importlib.abc.MetaPathFinder):
    """An import hook that answers `import NAME` (or a submodule) as if it were not installed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def hide_module(monkeypatch: pytest.MonkeyPatch, name: str, *importers: str) -> None:
    """Make `name` unimportable for one test; `importers`: the already imported modules (and
    their submodules) that import it, forgotten so that the command imports them afresh."""
    prefixes = (name, *importers)
    for module in list(sys.modules):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(sys, "meta_path", [_Hidden(name), *sys.meta_path])


@pytest.mark.parametrize(
    ("args", "hidden", "importers", "line"),
    [
        (
            ["bench", "run", "--results", "{tmp}/results"],
            "torch",
            ["gameon.baselines"],
            "gameon bench run needs PyTorch: pip install 'gameon-rl[train]'",
        ),
        (
            ["bench", "report", "{tmp}/results"],
            "scipy",
            ["gameon.benchmark.report", "gameon.benchmark.stats"],
            "gameon bench report needs SciPy: pip install 'gameon-rl[bench]'",
        ),
        (
            ["leaderboard", "submit", "{tmp}/results", "--board", "{tmp}/board"],
            "scipy",
            ["gameon.benchmark.leaderboard", "gameon.benchmark.report", "gameon.benchmark.stats"],
            "gameon leaderboard submit needs SciPy: pip install 'gameon-rl[bench]'",
        ),
        (
            ["experiment", "--run-dir", "{tmp}/results"],
            "pydantic",
            ["gameon.experimenter.loop", "gameon.records"],
            "gameon experiment needs pydantic: pip install 'gameon-rl[cli]'",
        ),
        (
            ["demo", "--out", "{tmp}/results/demo.gif"],
            "imageio",
            [],
            "gameon demo needs imageio: pip install 'gameon-rl[cli]'",
        ),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    hidden: str,
    importers: list[str],
    line: str,
) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    hide_module(monkeypatch, hidden, *importers)
    with pytest.raises(SystemExit) as exit_info:
        main([arg.format(tmp=tmp_path) for arg in args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(line) and len(err.splitlines()) == 1
    assert not (tmp_path / "results").exists() and not (tmp_path / "board").exists()


@pytest.mark.parametrize(
    ("args", "hidden", "line"),
    [
        (
            ["bench", "run", "--results", "{tmp}/results"],
            ["torch", "matplotlib"],
            "gameon bench run needs PyTorch: pip install 'gameon-rl[train]' (on a machine without",
        ),
        (
            ["experiment", "--run-dir", "{tmp}/results"],
            ["minari"],
            "gameon experiment needs Minari: pip install 'gameon-rl[train]'",
        ),
    ],
)
def test_a_command_checks_its_extras_before_it_starts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    hidden: list[str],
    line: str,
) -> None:
    """Without torch (nor matplotlib, which bench run imports first), the line names PyTorch and
    its CPU build, as the README promises; a missing Minari stops `gameon experiment` before it
    makes the run folder, not when the run first needs it."""
    importers = ["gameon.baselines", "gameon.benchmark", "gameon.experimenter", "gameon.plots"]
    for name in hidden:
        hide_module(monkeypatch, name, *importers)
    with pytest.raises(SystemExit) as exit_info:
        main([arg.format(tmp=tmp_path) for arg in args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(line) and len(err.splitlines()) == 1
    assert not (tmp_path / "results").exists()


def test_without_tyro_the_gameon_command_says_which_extra_to_install() -> None:
    hidden = "import sys; sys.modules['tyro'] = None; from gameon.cli import main; main(['envs'])"
    result = subprocess.run(
        [sys.executable, "-c", hidden], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "gameon envs needs tyro: pip install 'gameon-rl[cli]'"


def test_the_torch_line_gives_the_cpu_build_and_unknown_modules_still_raise() -> None:
    torch_line = missing_extra("bench run", ModuleNotFoundError("x", name="torch"))
    assert "gameon-rl[train]" in torch_line
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_line
    assert missing_extra("bench report", ModuleNotFoundError("x", name="matplotlib.pyplot")) == (
        "gameon bench report needs matplotlib: pip install 'gameon-rl[bench]'"
    )
    assert missing_extra("demo", ModuleNotFoundError("x", name="gameon.nope")) is None


def test_every_extra_of_pyproject_is_known_to_the_missing_extra_line() -> None:
    root = Path(__file__).resolve().parents[1]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    modules = {"google-genai": ["google"], "minari[hdf5]": ["minari", "h5py"]}
    for extra, provided in EXTRAS.items():
        for requirement in extras[extra]:
            name = re.split(r"[<>=!~ ]", requirement)[0]
            for module in modules.get(name, [name.replace("-", "_")]):
                assert module in provided, f"{module} ({requirement}) missing from EXTRAS[{extra}]"


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: gameon {envs,demo,experiment,bench,leaderboard} ...")
    for group, subcommand in HARNESS_USAGE:
        assert group in out and subcommand in out


@pytest.mark.parametrize("args", [["--help"], ["bench", "--help"]])
def test_output_to_a_reader_that_has_gone_is_no_traceback(args: list[str]) -> None:
    """`gameon --help | head -1`: the pipe closes before the command writes; it exits without
    a BrokenPipeError traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the command writes
    result = subprocess.run(
        [sys.executable, "-m", "gameon.cli", *args],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
    )
    os.close(write)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr
    assert result.returncode == 1


def test_another_broken_pipe_is_still_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only stdout's reader going is quiet: a pipe to a worker that breaks is a real error."""
    import gameon.cli

    def broken(arguments: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(gameon.cli, "run_command", broken)
    with pytest.raises(BrokenPipeError):
        main(["envs"])


@pytest.mark.parametrize("group", ["bench", "leaderboard"])
def test_harness_help_exits_0_listing_its_subcommands(
    group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([group, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for key in HARNESS_USAGE:
        assert (f"gameon {' '.join(key)}" in out) == (key[0] == group)


def test_python_m_gameon_is_the_gameon_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gameon", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "bench" in result.stdout and "leaderboard" in result.stdout


@pytest.mark.parametrize("learner", ["ppo", "sac", "bc", "iql"])
def test_learner_help_names_the_program(learner: str) -> None:
    pytest.importorskip("torch")
    module = f"gameon.baselines.{learner}"
    result = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m {module} [-h]")


def test_an_interrupted_experiment_says_how_to_resume_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    import gameon.cli

    def interrupted(args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(gameon.cli, "experiment", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        main(["experiment", "--run-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "interrupted: run the same command again to resume\n"


def test_ctrl_c_wrapped_by_ctypes_is_an_interruption_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A SIGINT landing while ctypes converted an EGL call's arguments came out as
    `ctypes.ArgumentError: argument 1: KeyboardInterrupt`, a traceback and exit code 1."""
    import ctypes

    import gameon.cli

    def wrapped(args: object) -> None:
        raise ctypes.ArgumentError("argument 1: KeyboardInterrupt")

    monkeypatch.setattr(gameon.cli, "demo", wrapped)
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--out", str(tmp_path / "x.gif")])
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "interrupted: no video written\n"

    def other(args: object) -> None:
        raise ctypes.ArgumentError("argument 1: TypeError: wrong type")

    monkeypatch.setattr(gameon.cli, "demo", other)
    with pytest.raises(ctypes.ArgumentError):  # a real error stays one
        main(["demo", "--out", str(tmp_path / "x.gif")])


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("out", ["/proc/x.gif", "/proc/gameon-test/x.gif"])
def test_a_video_folder_that_cannot_hold_files_exits_2_before_the_episode(
    capsys: pytest.CaptureFixture[str], out: str
) -> None:
    """The video was written after the episode, where /proc (a folder no one can write, even
    root) or a read-only disk raised a traceback from deep in imageio."""
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--out", out])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"gameon: error: cannot write the video to {out!r}: ")
    assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_a_failed_video_write_leaves_no_half_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, suffix: str
) -> None:
    """The video was written in place, so a write that failed or was interrupted midway (here a
    full disk) left a half video under the name the user asked for, over an earlier one."""
    iio = pytest.importorskip("imageio.v3")
    import gameon.cli

    def gif_half_written(path: Path, frames: np.ndarray, **kwargs: object) -> None:
        Path(path).write_bytes(b"half a video")
        raise OSError(28, "No space left on device")

    def mp4_disk_full(*args: object, **kwargs: object) -> Generator[None, np.ndarray, None]:
        encoder = real_frames(*args, **kwargs)
        encoder.send(None)
        try:
            for _ in range(2):
                encoder.send((yield))
        finally:
            encoder.close()  # ffmpeg ends the file with the frames it got
        raise OSError(28, "No space left on device")

    if suffix == ".gif":
        monkeypatch.setattr(iio, "imwrite", gif_half_written)
    else:
        imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
        real_frames = imageio_ffmpeg.write_frames
        monkeypatch.setattr(imageio_ffmpeg, "write_frames", mp4_disk_full)
    out = tmp_path / f"demo{suffix}"
    out.write_bytes(b"an earlier video")
    with pytest.raises(OSError, match="No space left on device"):
        gameon.cli.write_video(out, [np.zeros((16, 16, 3), np.uint8)] * 5)
    assert out.read_bytes() == b"an earlier video"
    assert [path.name for path in tmp_path.iterdir()] == [out.name]


@pytest.mark.parametrize("disk_full", [True, False])
def test_an_mp4_that_ffmpeg_left_unfinished_is_refused_not_renamed_into_place(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture, disk_full: bool
) -> None:
    """On a full disk ffmpeg fails writing its trailer, but imageio closes without a word: the
    demo said `video: ...`, exit 0, and left a video without its index that no player opens."""
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    import gameon.evaluation

    real_frames = imageio_ffmpeg.write_frames

    def trailer_lost(path: str, *args: object, **kwargs: object) -> Generator:
        encoder = real_frames(path, *args, **kwargs)
        encoder.send(None)
        try:
            while True:
                encoder.send((yield))
        finally:
            encoder.close()
            whole = Path(path).read_bytes()
            Path(path).write_bytes(whole[: whole.find(b"moov") - 4])  # as a full disk cuts it

    monkeypatch.setattr(imageio_ffmpeg, "write_frames", trailer_lost)
    free = 2**20 if disk_full else 2**40
    monkeypatch.setattr(
        gameon.evaluation.shutil, "disk_usage", lambda _: SimpleNamespace(free=free)
    )
    out = tmp_path / "demo.mp4"
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--env-id", "GameOn/Reach-v0", "--max-steps", "5", "--out", str(out)])
    captured = capsys.readouterr()
    assert exit_.value.code == 1 and "video:" not in captured.out
    assert not out.exists() and list(tmp_path.iterdir()) == []
    expected = (
        "no space left on the disk writing "
        if disk_full
        else "ffmpeg left the video unfinished: its index was never written"
    )
    assert captured.err.startswith("gameon: error: ") and expected in captured.err


def test_a_run_dir_that_cannot_hold_files_exits_2_before_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An existing folder that could not be written (read-only disk, another user's) passed the
    check, which only made the folder, and the run died in a traceback after its plan line."""
    pytest.importorskip("torch")
    import tempfile

    import gameon.experimenter.loop

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    real = tempfile.TemporaryFile

    def read_only(*args: object, dir: object = None, **kwargs: object) -> object:
        if dir is not None and Path(str(dir)) == run_dir:
            raise OSError(30, "Read-only file system")
        return real(*args, dir=dir, **kwargs)

    def run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    monkeypatch.setattr(gameon.experimenter.loop, "run_experiment", run)
    with pytest.raises(SystemExit) as exit_info:
        main(["experiment", "--run-dir", str(run_dir)])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"gameon: error: --run-dir {run_dir} cannot be made or written: Read-only file system\n"
    )


@pytest.mark.parametrize(
    ("command", "line"), [("demo", "interrupted: no video written\n"), ("envs", "interrupted\n")]
)
def test_ctrl_c_in_any_command_is_one_line_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, line: str
) -> None:
    """Ctrl-C in `gameon demo` (or `envs`) printed a traceback from wherever the episode was."""
    import gameon.cli

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(gameon.cli, "demo", interrupted)
    monkeypatch.setattr(gameon.cli, "list_envs", interrupted)
    with pytest.raises(BaseException) as exit_info:  # the interrupt itself, unfixed: a failure
        main([command])
    assert exit_info.type is SystemExit and exit_info.value.code == 130
    assert capsys.readouterr().err == line
