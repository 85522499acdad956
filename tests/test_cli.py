"""The `gameon` command line: listing the envs, recording a demo, and one-line usage errors."""

import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gameon.cli import main
from gameon.envs import ENV_SKILLS


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Run `gameon ARGS` in a fresh interpreter, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "gameon.cli", *args], capture_output=True, text=True, timeout=300
    )


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


@pytest.mark.parametrize("out", ["demo.avi", "demo"])
def test_bad_video_suffix_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture, out: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--out", str(tmp_path / out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert ".mp4" in err and ".gif" in err and len(err.strip().splitlines()) == 1


def test_bad_instruction_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("gameon.envs.experts")
    args = ["demo", "--instruction", "juggle the red block", "--out", str(tmp_path / "x.gif")]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "juggle" in err and len(err.strip().splitlines()) == 1


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
    assert "GEMINI_API_KEY" in err and "GOOGLE_API_KEY" in err and "--backend rules" in err
    assert not run_dir.exists()


def test_experiment_runs_and_prints_where_its_files_are(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("minari")
    pytest.importorskip("matplotlib")
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
        "--no-auto-stop",
        "--no-progress",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    main(args)
    out = capsys.readouterr().out
    assert str(run_dir / "record.json") in out and str(run_dir / "curves.png") in out
    assert (run_dir / "record.json").is_file() and (run_dir / "curves.png").is_file()
    with pytest.raises(SystemExit) as exit_info:  # same folder, another config: refused
        main([*args, "--seed", "1"])
    assert exit_info.value.code == 2
    assert "another config" in capsys.readouterr().err


def test_gameon_routes_bench_and_leaderboard_to_the_harness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["leaderboard", "submit", str(tmp_path / "missing"), "--board", str(tmp_path)])
    assert exit_info.value.code == 1
    assert "no run record at" in capsys.readouterr().out
    assert not (tmp_path / "leaderboard.json").exists()
