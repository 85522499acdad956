"""Offline learning: Minari datasets of scripted-expert episodes, behaviour cloning and IQL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tyro")
pytest.importorskip("minari")
pytest.importorskip("h5py", reason="Minari's HDF5 storage needs h5py (minari[hdf5])")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

from gameon.baselines import bc, common, datasets, iql  # noqa: E402
from gameon.envs import language  # noqa: E402
from gameon.policy import (  # noqa: E402
    Actor,
    flat_size,
    load_checkpoint,
    load_policy,
    save_checkpoint,
)

REACH = "gameon/reach-tiny-v0"
LIFT = "gameon/lift-mixed-v0"
ENV_SKILL = {"GameOn/Reach-v0": "reach", "GameOn/Lift-v0": "lift"}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A datasets folder with a tiny expert Reach dataset and a tiny mixed-quality Lift one."""
    path = tmp_path_factory.mktemp("datasets")
    common = {"datasets_path": str(path), "episodes_per_skill": 3, "progress": False}
    datasets.collect(datasets.Args(env_id="GameOn/Reach-v0", dataset_id=REACH, **common))
    datasets.collect(
        datasets.Args(
            env_id="GameOn/Lift-v0",
            dataset_id=LIFT,
            noise_levels=(0.0, 0.3),
            failed_fraction=0.34,
            **common,
        )
    )
    return path


@pytest.mark.parametrize("module", ["datasets", "bc", "iql"])
def test_help_exits_0(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", f"gameon.baselines.{module}", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "--dataset-id" in result.stdout and "--datasets-path" in result.stdout


@pytest.mark.parametrize(
    ("dataset_id", "env_id"), [(REACH, "GameOn/Reach-v0"), (LIFT, "GameOn/Lift-v0")]
)
def test_load_gives_consistent_transitions(root: Path, dataset_id: str, env_id: str) -> None:
    data = datasets.load(dataset_id, root)
    env = gym.make(env_id)
    datasets.check_compatible(data, env)
    assert data.env_id == env_id and data.num_episodes == 3
    n = data.size
    assert (
        data.observations.shape
        == data.next_observations.shape
        == (n, flat_size(env.observation_space))
    )
    assert data.actions.shape == (n, 5) and data.observations.dtype == np.float32
    for column in (data.rewards, data.terminals, data.timeouts, data.skills, data.episodes):
        assert column.shape == (n,)
    assert np.all(np.abs(data.actions) <= 1.0)
    skill = ENV_SKILL[env_id]
    assert np.all(data.skills == language.SKILLS.index(skill))
    for episode in np.unique(data.episodes):
        rows = np.flatnonzero(data.episodes == episode)
        ends = data.terminals[rows] | data.timeouts[rows]
        assert ends[-1] and not ends[:-1].any(), "an episode ends exactly at its last transition"
        assert np.array_equal(data.next_observations[rows[:-1]], data.observations[rows[1:]])
        # sparse rewards: 1 exactly on the success that terminates the episode
        assert data.rewards[rows].sum() == float(data.terminals[rows[-1]])


def test_sidecar_records_every_episode(root: Path) -> None:
    records = datasets.episode_records(LIFT, root)
    assert sorted(records) == [0, 1, 2]
    for record in records.values():
        assert language.parse(record["instruction"]).skill == record["skill"] == "lift"
        assert set(record) >= {"instruction", "skill", "noise", "success", "policy", "seed"}
    failed = [r for r in records.values() if r["policy"] == "random"]
    assert len(failed) == 1 and not failed[0]["success"]
    data = datasets.load(LIFT, root)
    for episode, record in records.items():
        rows = data.episodes == episode
        assert record["success"] == bool(data.terminals[rows][-1])
        assert record["length"] == int(rows.sum())
    # the same records travel inside the Minari dataset
    import minari

    dataset = minari.MinariDataset(datasets.dataset_dir(LIFT, root) / "data")
    metadata = list(dataset.storage.get_episode_metadata([0, 1, 2]))
    assert [m["instruction"] for m in metadata] == [records[i]["instruction"] for i in range(3)]
    assert dataset.storage.metadata["gameon"]["env_id"] == "GameOn/Lift-v0"


def test_datasets_path_defaults_to_minari_datasets_path(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    assert datasets.Args().datasets_path == str(root)
    assert datasets.load(REACH).num_episodes == 3
    assert os.environ["MINARI_DATASETS_PATH"] == str(root)


def test_the_same_settings_and_seed_give_the_same_bytes_wherever_written(tmp_path: Path) -> None:
    """The metadata recorded the datasets path (and --overwrite, --progress), so one collection
    written to two folders had two metadata.json files and two dataset hashes."""
    from gameon.integrity import folder_sha256

    folders = []
    for name, overwrite in (("a", False), ("elsewhere/b", True)):
        args = datasets.Args(
            env_id="GameOn/Reach-v0",
            dataset_id="gameon/same-v0",
            datasets_path=str(tmp_path / name),
            episodes_per_skill=2,
            overwrite=overwrite,
            progress=False,
        )
        datasets.collect(args)
        folders.append(datasets.dataset_dir(args.dataset_id, args.datasets_path))
    assert folder_sha256(folders[0]) == folder_sha256(folders[1])
    metadata = json.loads((folders[0] / "data" / "metadata.json").read_text())
    assert metadata["gameon"]["collect_args"]["seed"] == 0
    assert "datasets_path" not in metadata["gameon"]["collect_args"]


def test_collect_in_a_log_prints_a_line_a_tenth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The progress bar shows nothing when the output is not a terminal, so a collection in a
    log (minutes for the README's datasets) said nothing until it had written the dataset."""
    args = datasets.Args(
        env_id="GameOn/Reach-v0",
        dataset_id="gameon/logged-v0",
        datasets_path=str(tmp_path),
        episodes_per_skill=4,
    )
    datasets.collect(args)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("collected")]
    assert [line.split(" (")[0] for line in lines] == [
        f"collected {n}/4 episodes" for n in (1, 2, 3, 4)
    ]


def test_existing_dataset_is_never_overwritten_silently(tmp_path: Path) -> None:
    args = datasets.Args(
        env_id="GameOn/Reach-v0",
        dataset_id="gameon/twice-v0",
        datasets_path=str(tmp_path),
        episodes_per_skill=2,
        progress=False,
    )
    datasets.collect(args)
    args.episodes_per_skill = 1
    with pytest.raises(FileExistsError, match="gameon/twice-v0"):
        datasets.collect(args)
    with pytest.raises(SystemExit) as exit_info:
        datasets.main(args)
    assert exit_info.value.code == 2
    assert datasets.load("gameon/twice-v0", tmp_path).num_episodes == 2
    args.overwrite = True
    datasets.collect(args)
    assert datasets.load("gameon/twice-v0", tmp_path).num_episodes == 1


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"datasets_path": "file/datasets"}, "cannot write the dataset under "),
        ({"noise_levels": (0.0, float("nan"))}, "noise levels must be finite numbers >= 0"),
    ],
)
def test_collect_refuses_what_would_fail_before_it_collects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: dict, message: str
) -> None:
    """A datasets_path that cannot be written failed with a traceback only once every episode
    was collected (and lost); a NaN noise level at the first episode that used it."""
    (tmp_path / "file").write_text("a file, not a folder")
    monkeypatch.chdir(tmp_path)

    def must_not_run(*args: object) -> None:
        raise AssertionError("collected before refusing")

    monkeypatch.setattr(datasets, "run_episode", must_not_run)
    args = datasets.Args(
        env_id="GameOn/Reach-v0", dataset_id="gameon/x-v0", episodes_per_skill=2, progress=False
    )
    for name, value in setting.items():
        setattr(args, name, value)
    with pytest.raises(ValueError, match=message):
        datasets.collect(args)


def test_bad_dataset_ids_and_sizes_raise_value_errors(root: Path) -> None:
    with pytest.raises(ValueError, match="no dataset gameon/absent-v0"):
        datasets.load("gameon/absent-v0", root)
    with pytest.raises(ValueError, match="malformed dataset id"):
        datasets.load("not a dataset id", root)
    data = datasets.load(REACH, root)
    four_blocks = gym.make("GameOn/Reach-v0", blocks=4)
    with pytest.raises(ValueError) as error:
        datasets.check_compatible(data, four_blocks)
    message = str(error.value)
    assert REACH in message and f"size {data.obs_size}" in message
    assert f"expects {flat_size(four_blocks.observation_space)}" in message


def damage_truncated_data(folder: Path) -> None:
    data = folder / "data" / "main_data.hdf5"
    data.write_bytes(data.read_bytes()[:5000])


def damage_metadata(folder: Path) -> None:
    (folder / "data" / "metadata.json").write_text("{")


def damage_metadata_to_a_list(folder: Path) -> None:
    (folder / "data" / "metadata.json").write_text("[]")


def damage_episode_lengths(folder: Path) -> None:
    """Cut episode 1's actions and rewards short of its observations, as a damaged file might."""
    import h5py

    with h5py.File(folder / "data" / "main_data.hdf5", "r+") as data:
        episode = data["episode_1"]
        for name in ("actions", "rewards"):
            values = episode[name][...]
            del episode[name]
            episode[name] = values[:-3]


@pytest.mark.parametrize(
    ("damage", "cause"),
    [
        (damage_truncated_data, "OSError: "),
        (damage_metadata, "JSONDecodeError: "),
        (damage_metadata_to_a_list, "AttributeError: "),  # was a traceback from inside Minari
        # were read as they were: observations paired with other steps' actions
        (damage_episode_lengths, "ValueError: episode 1 has "),
    ],
)
def test_a_damaged_dataset_is_a_value_error_naming_it(
    root: Path, tmp_path: Path, damage, cause: str
) -> None:
    """A truncated HDF5 file or a broken metadata.json: h5py's OSError was a traceback, json's
    error did not say which file."""
    shutil.copytree(datasets.dataset_dir(REACH, root), tmp_path / REACH)
    damage(tmp_path / REACH)
    with pytest.raises(ValueError) as error:
        datasets.load(REACH, tmp_path)
    message = str(error.value)
    assert message.startswith(f"dataset {REACH} at {tmp_path / REACH} is not a readable Minari")
    assert cause in message


def test_a_minari_dataset_of_another_env_is_a_value_error_saying_so(tmp_path: Path) -> None:
    """A Minari dataset of flat observations (e.g. D4RL's) was an IndexError from load."""
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    env = gym.make("Pendulum-v1")
    buffer = EpisodeBuffer(
        id=0,
        observations=np.zeros((3, 3), np.float32),
        actions=np.zeros((2, 1), np.float32),
        rewards=np.zeros(2),
        terminations=np.zeros(2, bool),
        truncations=np.array([False, True]),
        infos={},
    )
    with datasets.datasets_root(tmp_path):
        minari.create_dataset_from_buffers(
            "pendulum-v0", [buffer], env=env, algorithm_name="x", author="x",
            author_email="x", code_permalink="x", description="x", eval_env="Pendulum-v1",
        )  # fmt: skip
    with pytest.raises(ValueError, match="not GameOn's dict of 'state' and 'goal'"):
        datasets.load("pendulum-v0", tmp_path)


@pytest.mark.parametrize("learner", [bc, iql])
def test_an_env_id_that_is_not_gameon_s_is_a_value_error(
    learner, root: Path, tmp_path: Path
) -> None:
    args = learner.Args(
        dataset_id=REACH, datasets_path=str(root), env_id="CartPole-v1", run_dir=str(tmp_path)
    )
    with pytest.raises(ValueError, match="unknown env id 'CartPole-v1'; the GameOn ids: GameOn/"):
        learner.train(args)


def check_run(summary: dict, algo: str, env_id: str) -> dict:
    """The files every offline run writes, and a usable checkpoint."""
    run_dir = Path(summary["run_dir"])
    assert list(run_dir.glob("events.out.tfevents.*")), "TensorBoard log"
    assert json.loads((run_dir / "summary.json").read_text())["algo"] == algo
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["env_id"] == env_id
    per_skill = evaluation["per_skill"]
    assert sum(r["episodes"] for r in per_skill.values()) == len(evaluation["episodes"]) == 1
    assert sum(r["successes"] for r in per_skill.values()) == sum(
        e["success"] for e in evaluation["episodes"]
    )
    policy = load_policy(run_dir / "checkpoint.pt")
    observation, _ = gym.make(env_id).reset(seed=0)
    action = policy(observation)
    assert action.shape == (5,) and np.all(np.abs(action) <= 1.0)
    return evaluation


def test_tiny_bc_run_writes_logs_checkpoint_eval_and_video(root: Path, tmp_path: Path) -> None:
    pytest.importorskip("imageio_ffmpeg")
    args = bc.Args(
        dataset_id=REACH,
        datasets_path=str(root),
        num_updates=300,
        log_every=100,
        eval_every=150,
        eval_episodes_per_skill=1,
        capture_video=True,
        run_dir=str(tmp_path / "bc"),
    )
    summary = bc.train(args)
    check_run(summary, "bc", "GameOn/Reach-v0")
    assert [e["update"] for e in summary["evals"]] == [150, 300]
    _, _, checkpoint = load_checkpoint(tmp_path / "bc" / "checkpoint.pt")
    assert checkpoint["extra"] == {"dataset_id": REACH, "num_updates": 300}, "not update 150's"
    evaluation = json.loads((tmp_path / "bc" / "eval.json").read_text())
    assert evaluation == summary["eval"] and evaluation["update"] == 300, "as mid-run ones"
    assert summary["videos"] and all(Path(v).stat().st_size > 0 for v in summary["videos"])


def test_tiny_iql_run_writes_logs_checkpoint_and_eval(root: Path, tmp_path: Path) -> None:
    args = iql.Args(
        dataset_id=LIFT,
        datasets_path=str(root),
        num_updates=200,
        log_every=50,
        eval_episodes_per_skill=1,
        run_dir=str(tmp_path / "iql"),
    )
    summary = iql.train(args)
    check_run(summary, "iql", "GameOn/Lift-v0")
    assert set(summary["final_losses"]) == {
        "value_loss",
        "critic_loss",
        "actor_loss",
        "continuous_loss",
        "gripper_loss",
    }
    assert all(np.isfinite(v) for v in summary["final_losses"].values())


def test_iql_copies_its_critics_once_per_checkpoint(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Evaluating every 2 of 4 updates: update 2's checkpoint and the final one (`finish`) hold the
    critics. The evaluation of update 4, which writes no checkpoint, copied them to the CPU too,
    and `finish` copied them again."""
    copies: list[int] = []
    copy_critics = iql.critics

    def counted(*networks: object) -> dict:
        copies.append(len(copies))
        return copy_critics(*networks)

    monkeypatch.setattr(iql, "critics", counted)
    iql.train(tiny_args(iql, root, tmp_path / "run", num_updates=4, eval_every=2))
    assert len(copies) == 2
    _, _, payload = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert {"critic", "value"} <= set(payload["extra"]) and "update" not in payload["extra"]


@pytest.mark.parametrize("learner", [bc, iql])
def test_training_prints_progress_between_evaluations(
    learner, root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without evaluations on the way (eval_every 0, the default) a run printed nothing until
    its end: IQL's default 100k updates are half an hour of silence at ~60 updates/s."""
    args = learner.Args(
        dataset_id=REACH,
        datasets_path=str(root),
        num_updates=30,
        print_every=10,
        batch_size=32,
        hidden=(16,),
        eval_episodes_per_skill=1,
        run_dir=str(tmp_path / "run"),
    )
    learner.train(args)
    lines = [line for line in capsys.readouterr().out.splitlines() if "updates/s" in line]
    assert [line.split(":")[0] for line in lines] == ["update 10/30", "update 20/30"]
    assert all(line.endswith(" s left") for line in lines)


def tiny_args(learner, root: Path, run_dir: Path, **overrides: object) -> object:
    """A few updates of a small network on the Reach data, evaluated on one episode per skill."""
    return learner.Args(
        dataset_id=REACH,
        datasets_path=str(root),
        batch_size=32,
        hidden=(16,),
        eval_episodes_per_skill=1,
        run_dir=str(run_dir),
        **overrides,
    )


def logged_steps(run_dir: Path) -> dict[str, list[int]]:
    """The steps of every TensorBoard scalar a run logged, by tag."""
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@pytest.mark.parametrize("learner", [bc, iql])
def test_evaluations_are_logged_under_the_tags_of_the_online_learners(
    learner, root: Path, tmp_path: Path
) -> None:
    """eval/success_rate_{skill}, as PPO and SAC log it, so that runs of both kinds line up in
    one TensorBoard: BC and IQL logged eval/success_rate/{skill}."""
    learner.train(tiny_args(learner, root, tmp_path / "run", num_updates=4, eval_every=2))
    logged = logged_steps(tmp_path / "run")
    evaluations = {tag: steps for tag, steps in logged.items() if tag.startswith("eval/")}
    assert evaluations == {"eval/success_rate": [2, 4], "eval/success_rate_reach": [2, 4]}


def interrupt_in_update(monkeypatch: pytest.MonkeyPatch, stop: int) -> None:
    """Make Ctrl-C arrive in update `stop` of every offline run, once its losses are logged."""
    progress = common.OfflineRun.print_progress

    def interrupted(run: common.OfflineRun, update: int, *rest: object) -> None:
        if update == stop:
            raise KeyboardInterrupt
        progress(run, update, *rest)

    monkeypatch.setattr(common.OfflineRun, "print_progress", interrupted)


@pytest.mark.parametrize("learner", [bc, iql])
def test_ctrl_c_keeps_the_last_evaluation_s_checkpoint_and_eval_and_says_so(
    learner,
    root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C in update 5 of 8, evaluating every 2: the folder keeps its closed logs (every point
    up to then) and update 4's checkpoint.pt, as a finished run's plus the update, and eval.json
    with its update (a finished run's has its last). BC and IQL wrote their checkpoint only at
    the end: an interrupted run kept nothing usable."""
    settings = {"num_updates": 8, "eval_every": 2, "log_every": 1}
    interrupt_in_update(monkeypatch, 5)
    run_dir = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        learner.train(tiny_args(learner, root, run_dir, **settings))
    assert capsys.readouterr().err == (
        f"interrupted at update 5 of 8: {run_dir} keeps its TensorBoard logs and the "
        "checkpoint.pt and eval.json of the evaluation at update 4, but no summary.json; a run "
        "does not resume, so start it again with a new --run-dir\n"
    )
    assert sorted(path.name.split(".")[0] for path in run_dir.iterdir()) == [
        "checkpoint",
        "eval",
        "events",
    ]
    logged = logged_steps(run_dir)
    assert logged["losses/actor_loss"] == [1, 2, 3, 4, 5]
    assert logged["eval/success_rate"] == [2, 4]
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["env_id"] == "GameOn/Reach-v0" and evaluation["update"] == 4
    assert evaluation["per_skill"]["reach"]["episodes"] == 1
    load_policy(run_dir / "checkpoint.pt")
    _, _, stopped = load_checkpoint(run_dir / "checkpoint.pt")
    assert stopped["extra"]["update"] == 4

    monkeypatch.undo()
    summary = learner.train(tiny_args(learner, root, tmp_path / "finished", **settings))
    _, _, finished = load_checkpoint(summary["checkpoint"])
    assert set(stopped) == set(finished)
    assert set(stopped["extra"]) == {*finished["extra"], "update"}
    assert finished["extra"]["num_updates"] == 8 and "update" not in finished["extra"]


@pytest.mark.parametrize(
    ("learner", "overrides", "message"),
    [
        # refused by torch or numpy only once the run folder was made, with a traceback
        (bc, {"learning_rate": -1.0}, r"learning_rate must be >= 0 \(0: the --init-checkpoint"),
        (bc, {"seed": 2**32}, r"seed must be in 0 \.\. 2\*\*32 - 1"),
        (iql, {"actor_lr": float("nan")}, "actor_lr must be a finite number > 0, got nan"),
        # NaN actions at the first evaluation, after the whole budget
        (iql, {"beta": float("nan")}, "beta must be >= 0"),
        (bc, {"ensemble_decay": float("nan")}, "ensemble_decay nan over chunks of 8"),
        (bc, {"ensemble_decay": -200.0}, r"keep \|ensemble_decay\| \* \(chunk_length - 1\)"),
        # trained on nonsense without a word
        (iql, {"critic_lr": 0.0}, "critic_lr must be a finite number > 0, got 0.0"),
        (iql, {"discount": 5.0}, r"discount must be in \[0, 1\], got 5.0"),
        (iql, {"polyak": 3.0}, r"polyak must be in \(0, 1\], got 3.0"),
        (iql, {"reward_scale": float("inf")}, "reward_scale must be a finite number"),
        (bc, {"hidden": (0, 0)}, r"hidden must be one or more widths >= 1, got \(0, 0\)"),
        (bc, {"eval_every": -5}, "eval_every must be >= 0"),
    ],
)
def test_offline_settings_that_cannot_work_are_refused_before_the_run_folder(
    root: Path, tmp_path: Path, learner, overrides: dict, message: str
) -> None:
    args = learner.Args(
        dataset_id=REACH, datasets_path=str(root), run_dir=str(tmp_path / "run"), **overrides
    )
    with pytest.raises(ValueError, match=message):
        learner.train(args)
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_whose_bytes_changed_is_refused_not_loaded(tmp_path: Path) -> None:
    """torch.load does not check the zip's CRCs: flipped bytes loaded as changed weights."""
    actor = Actor(20, 5, (64, 64), squash=True)
    path = save_checkpoint(tmp_path / "checkpoint.pt", "bc", "GameOn/Reach-v0", actor, None, {})
    load_checkpoint(path)
    damaged = bytearray(path.read_bytes())
    for offset in range(2_000, len(damaged) - 2_000, 501):
        damaged[offset] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match=r"is damaged: its part .* fails its checksum"):
        load_checkpoint(path)


def test_expectile_loss_weights_errors_asymmetrically() -> None:
    import torch

    diff = torch.tensor([2.0, -2.0])
    assert iql.expectile_loss(diff, 0.5).item() == pytest.approx(0.5 * 4.0)
    assert iql.expectile_loss(diff[:1], 0.7).item() == pytest.approx(0.7 * 4.0)
    assert iql.expectile_loss(diff[1:], 0.7).item() == pytest.approx(0.3 * 4.0)


def test_corrupt_checkpoint_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="checkpoint"):
        load_policy(path)


def test_a_run_folder_given_as_the_checkpoint_names_the_checkpoint_inside(tmp_path: Path) -> None:
    """load_policy(run_dir) said 'no checkpoint at run_dir', as if nothing were there."""
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(ValueError) as error:
        load_policy(tmp_path)
    assert str(error.value) == (
        f"{tmp_path} is a folder, not a checkpoint file; its run's checkpoint is "
        f"{tmp_path / 'checkpoint.pt'}"
    )


def test_bc_learns_reach_from_expert_episodes(tmp_path: Path) -> None:
    """200 expert Reach episodes, 1500 updates; the clone succeeds clearly above zero. With the
    default action chunks (8, binary gripper, ensemble decay -0.1): 1.00 over 20 suite episodes
    for seeds 1 to 3 (about 10 s each); the plain one-action actor (--chunk-length 1
    --no-binary-gripper) scored 0.30 to 0.45 with 4000 updates."""
    datasets.collect(
        datasets.Args(
            env_id="GameOn/Reach-v0",
            dataset_id="gameon/reach-expert-v0",
            datasets_path=str(tmp_path),
            episodes_per_skill=200,
            progress=False,
        )
    )
    summary = bc.train(
        bc.Args(
            dataset_id="gameon/reach-expert-v0",
            datasets_path=str(tmp_path),
            num_updates=1500,
            eval_episodes_per_skill=20,
            run_dir=str(tmp_path / "bc"),
        )
    )
    assert summary["eval"]["success_rate"] >= 0.8
