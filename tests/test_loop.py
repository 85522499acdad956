"""The collect loop: a tiny run's files, kill-and-resume equals running through, curricula."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("minari")
pytest.importorskip("matplotlib")

from gameon.atomic import file_lock  # noqa: E402
from gameon.baselines.datasets import episode_records  # noqa: E402
from gameon.experimenter import loop  # noqa: E402
from gameon.experimenter.curriculum import CurriculumChanged  # noqa: E402
from gameon.experimenter.loop import (  # noqa: E402
    DATASET_ID,
    LoopConfig,
    load_state,
    run_experiment,
)
from gameon.records import RECORD_FILE, RunRecord, load_record  # noqa: E402

TINY = LoopConfig(
    env_id="GameOn/Reach-v0",
    practice_env_id="GameOn/Reach-v0",
    curriculum="fixed",
    iterations=2,
    episodes_per_iteration=3,
    seed_episodes=3,
    num_updates=200,
    eval_episodes_per_skill=1,
    auto_stop=False,
)


def final_state(run_dir: Path) -> dict:
    """What must match between two runs of one seed: curves, curriculum, episode counts."""
    state = json.loads((run_dir / "state.json").read_text())
    keys = ("tasks", "seeds", "noise_seeds", "task_success", "eval", "executors")
    history = [{k: h[k] for k in keys} for h in state["history"]]
    return {
        "iteration": state["iteration"],
        "curves": state["curves"],
        "curriculum": state["curriculum"],
        "episodes": state["dataset"]["episodes"],
        "history": history,
    }


def test_each_iteration_says_what_it_evaluated_and_what_is_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Progress bars draw nothing when stderr is a log: a line per iteration says it moves."""
    run_experiment(replace(TINY, iterations=1, num_updates=20), tmp_path, progress=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if "committed in" in line]
    assert [line.split(" committed")[0] for line in lines] == ["iteration 0/1", "iteration 1/1"]
    assert "evaluated success reach " in lines[0]
    assert lines[0].endswith(" s at this pace") and "1 to go, about " in lines[0]
    assert "to go" not in lines[1]


def test_ctrl_c_in_training_leaves_the_learner_s_line_in_train_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The learner's own Ctrl-C line says to start again in a new folder, which contradicts the
    loop's "run the same command again to resume": it belongs in the policy's train.log only."""
    from gameon.baselines.common import OfflineRun

    def ctrl_c(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(OfflineRun, "print_progress", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(replace(TINY, iterations=1, num_updates=20), tmp_path, progress=False)
    assert "--run-dir" not in capsys.readouterr().err
    (log,) = tmp_path.glob("**/train.log")
    assert "interrupted at update 1 of 20" in log.read_text()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunRecord]:
    run_dir = tmp_path_factory.mktemp("tiny")
    return run_dir, run_experiment(TINY, run_dir, progress=False)


def test_tiny_run_writes_state_record_curves_and_dataset(tiny_run: tuple[Path, RunRecord]) -> None:
    run_dir, record = tiny_run
    for name in ("state.json", "record.json", "curves.png"):
        assert (run_dir / name).is_file(), name
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    expected = TINY.seed_episodes + TINY.iterations * TINY.episodes_per_iteration
    state = json.loads((run_dir / "state.json").read_text())
    assert state["iteration"] == TINY.iterations
    assert state["dataset"]["episodes"] == record.extra["dataset"]["episodes"] == expected
    assert record.collected.episodes == TINY.iterations * TINY.episodes_per_iteration
    assert record.collected.skills == {"reach": record.collected.episodes}
    root = run_dir / state["dataset"]["root"]
    assert len(episode_records(DATASET_ID, root)) == expected
    assert sorted(p.name for p in (run_dir / "datasets").iterdir()) == [root.name]
    assert len(state["curves"]["reach"]) == TINY.iterations + 1
    assert (run_dir / state["policy"]).is_file()
    for k in range(TINY.iterations + 1):
        assert (run_dir / "policies" / f"iter_{k}" / "checkpoint.pt").is_file()
    saved = load_record(run_dir)
    assert saved == record
    assert saved.protocol == "collect" and saved.extra["stopped"] == "budget"
    assert saved.curriculum_label == "fixed" and saved.curve_unit == "iterations"
    assert saved.extra["config"] == asdict(TINY)
    assert [it["episodes"] for it in saved.extra["iterations"]] == [3, 6, 9]
    assert [point.step for point in saved.curve] == [0, 1, 2]
    assert saved.curve[-1].success_rate == saved.evaluation.success_rate()
    assert {"gameon-rl", "mujoco", "gymnasium", "torch"} <= set(saved.versions)
    assert saved.wall_seconds > 0 and saved.env_steps > 0
    assert (run_dir / saved.checkpoint).is_file()


def test_a_finished_run_resumes_as_a_no_op(tiny_run: tuple[Path, RunRecord]) -> None:
    run_dir, record = tiny_run
    before = final_state(run_dir)
    again = run_experiment(TINY, run_dir, progress=False)
    assert final_state(run_dir) == before
    assert again.curve == record.curve and again.evaluation == record.evaluation
    with pytest.raises(ValueError, match="another config"):
        run_experiment(replace(TINY, seed=1), run_dir, progress=False)


def test_a_state_written_before_the_vlm_transport_settings_resumes(
    tiny_run: tuple[Path, RunRecord], tmp_path: Path
) -> None:
    run_dir, _ = tiny_run
    state = json.loads((run_dir / "state.json").read_text())
    for name in ("vlm_timeout", "vlm_retries"):
        del state["config"][name]
    (tmp_path / "state.json").write_text(json.dumps(state))
    assert load_state(tmp_path, TINY).iteration == TINY.iterations
    patient = replace(TINY, vlm_timeout=60.0, vlm_retries=5)  # how requests are sent: may change
    assert load_state(tmp_path, patient).iteration == TINY.iterations
    with pytest.raises(ValueError, match=r"\(seed differ: seed was 0, now 1\)"):
        load_state(tmp_path, replace(TINY, seed=1))


def test_a_finished_run_is_not_cut_to_fewer_iterations_than_it_did(
    tiny_run: tuple[Path, RunRecord],
) -> None:
    run_dir, _ = tiny_run
    fewer = replace(TINY, iterations=TINY.iterations - 1)
    with pytest.raises(ValueError, match=f"has done {TINY.iterations} iterations; resume or"):
        load_state(run_dir, fewer)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seed_noise": float("nan")}, "seed_noise must be a number >= 0, got nan"),
        ({"seed_noise": -0.1}, "seed_noise must be a number >= 0, got -0.1"),
        ({"report_env_id": TINY.env_id}, f"report_env_id {TINY.env_id} is the target env_id"),
        # the stages file was blamed ("hand_curriculum.toml: budget must be >= 1 outcomes")
        (
            {"curriculum": "hand", "iterations": 0},
            "iterations 0 leaves the hand curriculum no episodes to size its stages by",
        ),
        # ignored, the run went on as lp
        ({"hand_curriculum": "stages.toml"}, "hand_curriculum is only read by the hand"),
        # passed, then overflowed the ensemble weights after the seed data
        ({"chunk_length": 100_000}, "chunk_length must be at most 400 steps"),
    ],
)
def test_settings_that_would_fail_late_are_refused_up_front(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        replace(TINY, **changes).validate()


def test_a_folder_of_other_files_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    mine = tmp_path / "project"
    (mine / "datasets" / "mydata").mkdir(parents=True)
    (mine / "datasets" / "mydata" / "a.txt").write_text("mine")
    (mine / "record.json").write_text('{"mine": 1}')
    with pytest.raises(
        ValueError, match="holds files but no collect run \\(datasets, record.json\\)"
    ):
        run_experiment(TINY, mine, progress=False)
    assert (mine / "datasets" / "mydata" / "a.txt").read_text() == "mine"
    assert sorted(p.name for p in mine.iterdir()) == ["datasets", "record.json"]


SCRIPT = """
import json, sys
from pathlib import Path
from gameon.experimenter.loop import LoopConfig, run_experiment
run_experiment(LoopConfig(**json.loads(sys.argv[1])), Path(sys.argv[2]), progress=False)
"""


def start_and_kill(run_dir: Path, sign: str, timeout: float = 120.0) -> bool:
    """Run TINY in a subprocess and SIGKILL it once `sign` exists; False if it finished first."""
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, json.dumps(asdict(TINY)), str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if (run_dir / sign).exists():
                process.send_signal(signal.SIGKILL)
                process.wait()
                return True
            time.sleep(0.01)
        assert process.poll() is not None, f"the run neither reached {sign} nor finished"
        assert process.returncode == 0, process.stderr.read().decode()
        return False
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()


def committed_iteration(run_dir: Path) -> int:
    return json.loads((run_dir / "state.json").read_text())["iteration"]


def test_killed_and_resumed_equals_uninterrupted(
    tiny_run: tuple[Path, RunRecord], tmp_path: Path
) -> None:
    # Kill 1: iteration 1 has copied the dataset (its root exists), nothing of it is committed.
    for attempt in range(3):
        run_dir = tmp_path / f"killed_{attempt}"
        if start_and_kill(run_dir, "datasets/iter_1"):
            break
    else:
        pytest.fail("the subprocess finished every time before it could be killed")
    assert committed_iteration(run_dir) == 0
    # Kill 2: iteration 2 has recorded its episodes and is training; iteration 1 is committed.
    killed_again = start_and_kill(run_dir, "policies/iter_2")
    if killed_again:
        assert committed_iteration(run_dir) == 1
        extra = episode_records(DATASET_ID, run_dir / "datasets" / "iter_2")
        assert len(extra) == 9  # more episodes on disk than the 6 the state committed
    run_experiment(TINY, run_dir, progress=False)
    assert final_state(run_dir) == final_state(tiny_run[0])
    root = run_dir / json.loads((run_dir / "state.json").read_text())["dataset"]["root"]
    assert len(episode_records(DATASET_ID, root)) == 9
    assert [p.name for p in (run_dir / "datasets").iterdir()] == [root.name]


@pytest.mark.parametrize("curriculum", ["fixed", "hand", "lp"])
def test_each_curriculum_runs_an_iteration(tmp_path: Path, curriculum: str) -> None:
    config = replace(
        TINY,
        practice_env_id="GameOn/MultiSkill-v0",
        curriculum=curriculum,
        iterations=1,
        episodes_per_iteration=2,
        seed_episodes=2,
    )
    record = run_experiment(config, tmp_path, progress=False)
    assert record.extra["dataset"]["episodes"] == 4
    assert len(record.curve) == 2 and "reach" in record.curve[-1].per_skill
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["curriculum"]["name"] == curriculum
    if curriculum == "hand":  # the first stage practises reach only
        assert all(t.startswith("move the gripper") for t in state["history"][1]["tasks"])


def test_promoted_skill_runs_its_learned_policy(tmp_path: Path) -> None:
    record = run_experiment(replace(TINY, iterations=1, promote_threshold=0.0), tmp_path, False)
    assert [it["executors"]["reach"] for it in record.extra["iterations"]] == [
        "learned",
        "learned",
    ]
    state = json.loads((tmp_path / "state.json").read_text())
    reach = next(s for s in state["library"]["skills"] if s["name"] == "reach")
    assert reach["executor"] == {"kind": "learned", "checkpoint": state["policy"]}
    episodes = episode_records(DATASET_ID, tmp_path / state["dataset"]["root"])
    executors = [o["executor"] for _, e in sorted(episodes.items()) for o in e["outcomes"]]
    assert executors == ["scripted"] * 3 + ["learned"] * 3


def test_mastered_target_stops_the_run(tmp_path: Path) -> None:
    config = replace(TINY, stop_threshold=0.0, auto_stop=True)
    record = run_experiment(config, tmp_path, progress=False)
    assert record.extra["stopped"] == "mastered" and record.extra["iterations_done"] == 0
    assert record.extra["target_mastered"]
    assert record.extra["dataset"]["episodes"] == TINY.seed_episodes
    assert run_experiment(config, tmp_path, progress=False).extra["iterations_done"] == 0


def test_a_mastered_run_stays_stopped_with_auto_stop_and_says_how_to_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = replace(TINY, stop_threshold=0.0, auto_stop=True, iterations=1, num_updates=20)
    config = replace(config, target_eval_episodes=1)
    assert run_experiment(config, tmp_path, progress=False).extra["stopped"] == "mastered"
    assert "auto_stop" not in capsys.readouterr().err
    record = run_experiment(replace(config, iterations=3), tmp_path, progress=False)
    assert record.extra["stopped"] == "mastered" and record.extra["iterations_done"] == 0
    note = " ".join(capsys.readouterr().err.split())
    assert "stopped at iteration 0, when every target skill reached stop_threshold 0.0" in note
    assert "auto_stop keeps it stopped: iterations 3 adds no iteration" in note
    assert "resume with auto_stop off (gameon experiment ... --no-auto-stop" in note
    record = run_experiment(replace(config, auto_stop=False), tmp_path, progress=False)
    assert record.extra["stopped"] == "budget" and record.extra["iterations_done"] == 1
    assert record.extra["dataset"]["episodes"] == TINY.seed_episodes + TINY.episodes_per_iteration
    assert load_record(tmp_path) == record


def test_an_extended_run_counts_each_piece_of_work_once_in_its_wall_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first final evaluation is superseded by the extended run's: its seconds go."""
    evaluate_targets, durations = loop.evaluate_targets, []

    def slow_evaluate_targets(*args: object) -> list[dict]:
        start = time.perf_counter()
        time.sleep(0.5)  # so that counting it twice shows
        targets = evaluate_targets(*args)
        durations.append(time.perf_counter() - start)
        return targets

    monkeypatch.setattr(loop, "evaluate_targets", slow_evaluate_targets)
    config = replace(TINY, iterations=1, num_updates=20, target_eval_episodes=1)
    for iterations in (1, 2):
        record = run_experiment(replace(config, iterations=iterations), tmp_path, progress=False)
        state = json.loads((tmp_path / "state.json").read_text())
        assert len(state["history"]) == iterations + 1 and len(durations) == iterations
        iterations_seconds = sum(h["seconds"] for h in state["history"])
        assert state["wall_seconds"] == pytest.approx(iterations_seconds + durations[-1], abs=0.1)
        assert record.wall_seconds == state["wall_seconds"]


def test_a_resumed_run_may_change_a_setting_its_curriculum_does_not_read(
    tiny_run: tuple[Path, RunRecord], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run[0], run_dir)
    other = replace(TINY, vlm_backend="gemini", vlm_proposal_size=2, vlm_add_skills=False)
    record = run_experiment(other, run_dir, progress=False)  # fixed reads no vlm_* setting
    assert record.extra["iterations_done"] == TINY.iterations
    state = json.loads((run_dir / "state.json").read_text())
    state["config"]["curriculum"] = "vlm"
    (tmp_path / "state.json").write_text(json.dumps(state))
    vlm = replace(TINY, curriculum="vlm")
    assert state["config"]["vlm_backend"] == "rules"  # a run that did nothing commits nothing
    assert load_state(tmp_path, vlm).iteration == TINY.iterations
    with pytest.raises(
        ValueError,
        match=r"another config \(vlm_backend differ: vlm_backend was .rules., now .gemini.\).*the "
        r"settings the vlm curriculum does not",
    ):
        load_state(tmp_path, replace(vlm, vlm_backend="gemini"))


def files_in(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run folder and its contents, by path relative to the folder."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def test_a_resume_whose_state_does_not_load_removes_nothing(
    tiny_run: tuple[Path, RunRecord], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run[0], run_dir)
    state = json.loads((run_dir / "state.json").read_text())
    state["curriculum"]["name"] = "lp"
    (run_dir / "state.json").write_text(json.dumps(state))
    before = files_in(run_dir)
    with pytest.raises(ValueError, match="state is for curriculum 'lp', not 'fixed'"):
        run_experiment(replace(TINY, iterations=3), run_dir, progress=False)
    assert files_in(run_dir) == before
    assert "record.json" in before


def test_a_folder_another_run_is_working_in_is_refused_and_left_as_it_was(
    tiny_run: tuple[Path, RunRecord], tmp_path: Path
) -> None:
    """A second `gameon experiment` on the same folder (a second terminal) resumed beside the
    first: it removed the first's uncommitted dataset, its record went with it, and every later
    resume crashed on a state naming a dataset that was gone."""
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run[0], run_dir)
    before = files_in(run_dir)
    with (
        file_lock(run_dir / loop.RUN_LOCK_FILE),  # as the first run holds it
        pytest.raises(loop.RunFolderInUse, match="is in use by another run"),
    ):
        run_experiment(replace(TINY, iterations=3), run_dir, progress=False)
    assert files_in(run_dir) == before


def test_a_finished_hand_run_goes_on_with_more_iterations_and_keeps_its_stage_windows(
    tmp_path: Path,
) -> None:
    config = replace(
        TINY,
        practice_env_id="GameOn/MultiSkill-v0",
        curriculum="hand",
        iterations=1,
        episodes_per_iteration=24,
        seed_episodes=2,
        num_updates=20,
        target_eval_episodes=1,
    )
    run_experiment(config, tmp_path, progress=False)
    windows = json.loads((tmp_path / "state.json").read_text())["curriculum"]["windows"]
    assert windows == [3, 3, 3, 3, 4]  # a budget of 48 episodes would give [4, 4, 5, 5, 7]
    record = run_experiment(replace(config, iterations=2), tmp_path, progress=False)
    assert record.extra["iterations_done"] == 2 and record.extra["stopped"] == "budget"
    assert load_record(tmp_path) == record
    assert json.loads((tmp_path / "state.json").read_text())["curriculum"]["windows"] == windows


def test_the_state_and_record_keep_the_iterations_an_extended_run_started_with(
    tmp_path: Path,
) -> None:
    """An extension keeps the budget the run's curriculum was built with, so the state and the
    record say which it was (the audit re-runs an extended hand run from it); a state from
    before this was kept still extends, saying it does not know (None)."""
    config = replace(TINY, iterations=1, num_updates=20, target_eval_episodes=1)
    record = run_experiment(config, tmp_path, progress=False)
    assert record.training.start_iterations == 1
    record = run_experiment(replace(config, iterations=2), tmp_path, progress=False)
    assert record.training.start_iterations == 1 and record.budget["iterations"] == 2
    assert json.loads((tmp_path / "state.json").read_text())["start_iterations"] == 1

    older = json.loads((tmp_path / "state.json").read_text())
    del older["start_iterations"]
    (tmp_path / "state.json").write_text(json.dumps(older))
    record = run_experiment(replace(config, iterations=3), tmp_path, progress=False)
    assert record.extra["iterations_done"] == 3 and record.training.start_iterations is None


def test_an_interrupted_extension_keeps_the_finished_record_and_the_users_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extending a finished run deleted its record.json at once (Ctrl-C during the extension
    lost the finished run's result for good), and each start deleted every entry of datasets/
    but the committed root and failed on a policies/iter_1_backup copy."""
    config = replace(TINY, iterations=1, num_updates=20, target_eval_episodes=1)
    finished = run_experiment(config, tmp_path, progress=False)
    shutil.copytree(tmp_path / "policies" / "iter_1", tmp_path / "policies" / "iter_1_backup")
    (tmp_path / "datasets" / "my_notes.txt").write_text("mine")
    (tmp_path / "datasets" / "iter_1_snapshot").mkdir()

    def interrupted(*args: object) -> list[dict]:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(loop, "evaluate_targets", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(replace(config, iterations=2), tmp_path, progress=False)
    assert not (tmp_path / RECORD_FILE).exists()  # no report counts the unfinished extension
    assert load_record(tmp_path / "record_after_iteration_1.json") == finished
    extended = run_experiment(replace(config, iterations=2), tmp_path, progress=False)
    assert extended.extra["iterations_done"] == 2 and load_record(tmp_path) == extended
    assert load_record(tmp_path / "record_after_iteration_1.json") == finished
    assert (tmp_path / "datasets" / "my_notes.txt").read_text() == "mine"
    assert (tmp_path / "datasets" / "iter_1_snapshot").is_dir()
    assert (tmp_path / "policies" / "iter_1_backup").is_dir()
    assert sorted(p.name for p in (tmp_path / "datasets").glob("iter_?")) == ["iter_2"]


def test_a_moved_run_folder_resumes_with_its_own_checkpoints(tmp_path: Path) -> None:
    config = replace(TINY, iterations=1, num_updates=20, target_eval_episodes=1)
    run_experiment(config, tmp_path / "a", progress=False)
    moved = tmp_path / "b"
    (tmp_path / "a").rename(moved)
    record = run_experiment(replace(config, iterations=2), moved, progress=False)
    assert record.extra["iterations_done"] == 2
    state = json.loads((moved / "state.json").read_text())
    checkpoints = {s["executor"]["checkpoint"] for s in state["library"]["skills"]}
    assert checkpoints == {state["policy"]} == {"policies/iter_2/checkpoint.pt"}
    assert record.extra["library"] == state["library"]


def test_an_older_state_with_absolute_checkpoints_loads_unless_the_folder_moved(
    tiny_run: tuple[Path, RunRecord], tmp_path: Path
) -> None:
    """States written before checkpoints were kept relative to the run folder."""
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run[0], run_dir)
    state = json.loads((run_dir / "state.json").read_text())
    for skill in state["library"]["skills"]:
        skill["executor"]["checkpoint"] = str((run_dir / state["policy"]).resolve())
    (run_dir / "state.json").write_text(json.dumps(state))
    assert run_experiment(TINY, run_dir, progress=False).extra["iterations_done"] == 2
    for skill in state["library"]["skills"]:
        skill["executor"]["checkpoint"] = str((tiny_run[0] / state["policy"]).resolve())
    (run_dir / "state.json").write_text(json.dumps(state))
    before = files_in(run_dir)
    with pytest.raises(ValueError, match="outside the run folder .* move it back"):
        run_experiment(TINY, run_dir, progress=False)
    assert files_in(run_dir) == before


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"curriculum": "vlm", "vlm_backend": "nope"}, "unknown VLM backend 'nope'"),
        ({"curriculum": "vlm", "vlm_backend": "replay"}, "needs a transcript"),
        ({"vlm_model": "gpt-4o-mini"}, "only read by the vlm curriculum"),
        ({"curriculum": "nope"}, "fixed, hand, lp"),
        ({"learner": "ppo"}, "bc, iql"),
        ({"env_id": "GameOn/Tower-v0", "practice_env_id": "GameOn/Reach-v0"}, "MultiSkill"),
        (
            {"env_id": "GameOn/Tower-v0", "practice_env_id": "GameOn/Tower-v0"},
            "practice env GameOn/Tower-v0 does not accept stack, which its tasks are run as",
        ),
        ({"iterations": -1}, "iterations"),
        ({"stop_threshold": 1.5}, "stop_threshold"),
    ],
)
def test_bad_config_is_refused_before_anything_runs(
    tmp_path: Path, change: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        run_experiment(replace(TINY, **change), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_negative_seed_is_refused_as_the_seed_not_the_curriculum() -> None:
    with pytest.raises(ValueError, match="seed must be >= 0 .*got -1"):
        LoopConfig(seed=-1).validate()


ONE_EACH = replace(
    TINY,
    iterations=1,
    episodes_per_iteration=1,
    seed_episodes=1,
    num_updates=1,
    target_eval_episodes=1,
)
"""A run of one of everything: seconds, and every count a line says is 1."""
TWO_STAGES = """
[[stage]]
name = "red"
instructions = ["reach red"]
window = {window}
threshold = 0.5

[[stage]]
name = "any"
skills = ["reach"]
window = 3
threshold = 0.5
"""


def test_a_hand_run_resumes_with_its_stages_file_named_another_way_or_from_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume had to name the stages file by the very string the run started with: the same
    file by its absolute path, as ./stages.toml, or from another folder was "another config"."""
    first, other, run_dir = tmp_path / "first", tmp_path / "other", tmp_path / "run"
    first.mkdir()
    other.mkdir()
    (first / "stages.toml").write_text(TWO_STAGES.format(window=2))
    (other / "copy.toml").write_text(TWO_STAGES.format(window=2))
    config = replace(ONE_EACH, curriculum="hand", hand_curriculum="stages.toml")
    monkeypatch.chdir(first)
    run_experiment(config, run_dir, progress=False)
    for name in ("./stages.toml", str(first / "stages.toml")):
        assert loop.check_resumable(run_dir, replace(config, hand_curriculum=name)) is not None
    monkeypatch.chdir(other)
    with pytest.raises(ValueError, match="another config .*hand_curriculum was 'stages.toml'"):
        loop.check_resumable(run_dir, replace(config, hand_curriculum="copy.toml"))
    extended = replace(config, hand_curriculum="../first/stages.toml", iterations=2)
    assert run_experiment(extended, run_dir, progress=False).extra["iterations_done"] == 2
    state = json.loads((run_dir / "state.json").read_text())
    assert state["hand_curriculum_file"] == str((first / "stages.toml").resolve())

    (first / "stages.toml").write_text(TWO_STAGES.format(window=4))
    with pytest.raises(CurriculumChanged, match="stages .* differ"):
        run_experiment(replace(extended, iterations=3), run_dir, progress=False)
    (first / "stages.toml").write_text(TWO_STAGES.format(window=2))
    del state["hand_curriculum_file"]  # a state from before it was kept
    (run_dir / "state.json").write_text(json.dumps(state))
    assert loop.check_resumable(run_dir, replace(extended, iterations=3)) is not None


def test_counts_of_one_are_said_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_experiment(ONE_EACH, tmp_path, progress=True)
    assert ": 1 episode per target skill, monolithic and composed" in capsys.readouterr().err
    with pytest.raises(ValueError, match="has done 1 iteration; resume or extend it"):
        load_state(tmp_path, replace(ONE_EACH, iterations=0))


def test_a_hand_stage_window_that_cannot_fill_is_warned_of_as_the_run_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A window longer than the run's outcomes kept the curriculum in its first stage without a
    word: the warning names the stage, its window, the outcomes and what to change."""
    stages = tmp_path / "stages.toml"
    stages.write_text(TWO_STAGES.format(window=50))
    config = replace(ONE_EACH, curriculum="hand", hand_curriculum=str(stages))
    record = run_experiment(config, tmp_path / "run", progress=False)
    assert record.extra["iterations_done"] == 1, "warned, not refused"
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert line == (
        "warning: hand curriculum stage 'red' (window 50) can never end, so stage 'any' is never "
        "practised: its window needs 50 more outcomes of its tasks, more than the 3 the run has "
        f"left to report to the curriculum; give smaller windows in {stages} (window, or "
        "window_share and min_window), or more iterations or episodes_per_iteration (the run has "
        "1 practice episode and 2 evaluation episodes left to report: iterations 1, "
        "episodes_per_iteration 1)"
    )
    stages.write_text(TWO_STAGES.format(window=3))
    run_experiment(config, tmp_path / "fits", progress=False)
    assert "warning" not in capsys.readouterr().err
