"""`gameon.baselines.datasets` on what a new user gets wrong: reading a path that is not there
creates nothing, a recovered env plays the dataset's rewards, and bad input is one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tyro")
pytest.importorskip("minari")
pytest.importorskip("h5py", reason="Minari's HDF5 storage needs h5py (minari[hdf5])")

from minari.data_collector.episode_buffer import EpisodeBuffer  # noqa: E402

from gameon.baselines import datasets  # noqa: E402

DENSE = "gameon/reach-dense-v0"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A datasets folder with two expert Reach episodes stored with dense rewards."""
    path = tmp_path_factory.mktemp("datasets")
    args = datasets.Args(
        env_id="GameOn/Reach-v0",
        dataset_id=DENSE,
        datasets_path=str(path),
        episodes_per_skill=2,
        reward_mode="dense",
        progress=False,
    )
    datasets.collect(args)
    return path


def tree(folder: Path) -> list[str]:
    """Every path under `folder`, relative to it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize(
    "read", [datasets.load, datasets.episode_records, datasets.check_dataset_exists]
)
def test_reading_from_a_folder_that_is_not_there_creates_nothing(read, tmp_path: Path) -> None:
    """`load` made the missing datasets folder (and its parents) before saying there was no
    dataset."""
    missing = tmp_path / "nowhere" / "datasets"
    with pytest.raises(ValueError) as error:
        read("gameon/absent-v0", missing)
    assert str(error.value).startswith(
        f"no dataset gameon/absent-v0: datasets_path {missing} does not exist; "
    )
    assert tree(tmp_path) == []


def test_reading_the_default_folder_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    with pytest.raises(ValueError, match="datasets_path .*datasets does not exist"):
        datasets.load("gameon/absent-v0")
    assert tree(tmp_path) == []


def test_a_file_as_the_datasets_folder_is_said_to_be_a_file(tmp_path: Path) -> None:
    (tmp_path / "datasets").write_text("a file, not a folder")
    with pytest.raises(ValueError, match=r"datasets_path .*datasets is a file, not a folder; "):
        datasets.load("gameon/absent-v0", tmp_path / "datasets")


def test_a_dataset_folder_without_minari_data_is_no_dataset(tmp_path: Path) -> None:
    """The learners' check passed a folder that Minari's `load_dataset` does not read."""
    (tmp_path / "gameon" / "empty-v0").mkdir(parents=True)
    with pytest.raises(ValueError) as error:
        datasets.check_dataset_exists("gameon/empty-v0", tmp_path)
    assert str(error.value).startswith(
        f"no dataset gameon/empty-v0: {tmp_path}/gameon/empty-v0 holds no Minari data folder; "
    )


def test_a_dataset_left_aside_by_an_interrupted_overwrite_is_said_to_be_there(
    root: Path, tmp_path: Path
) -> None:
    """Between an overwrite's two renames the dataset sits in a hidden folder: a reader is told
    where and how to put it back."""
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    folder = tmp_path / DENSE
    folder.rename(folder.with_name(f".{folder.name}.old"))
    with pytest.raises(ValueError, match="an overwrite of it was interrupted") as error:
        datasets.load(DENSE, tmp_path)
    assert f"rename that folder back to {folder}" in str(error.value)
    folder.with_name(f".{folder.name}.old").rename(folder)
    assert datasets.load(DENSE, tmp_path).size > 0


@pytest.mark.parametrize("eval_env", [False, True])
def test_the_recovered_env_gives_the_dataset_s_rewards(root: Path, eval_env: bool) -> None:
    """The eval env was stored as the bare env id, so `recover_environment(eval_env=True)` made
    a sparse-reward env for a dataset of dense rewards."""
    import minari

    dataset = minari.MinariDataset(datasets.dataset_dir(DENSE, root) / "data")
    env = dataset.recover_environment(eval_env=eval_env)
    assert env.unwrapped.reward_mode == "dense"
    records = datasets.episode_records(DENSE, root)
    for episode in dataset.iterate_episodes():
        record = records[episode.id]
        env.reset(seed=record["seed"], options={"instruction": record["instruction"]})
        rewards = [env.step(action)[1] for action in episode.actions]
        np.testing.assert_array_equal(rewards, episode.rewards)
    env.close()


def test_a_damaged_episodes_file_is_a_value_error_naming_it(root: Path, tmp_path: Path) -> None:
    """A broken episodes.json was json's error alone (or a KeyError), not naming the file."""
    import shutil

    shutil.copytree(datasets.dataset_dir(DENSE, root), tmp_path / DENSE)
    sidecar = tmp_path / DENSE / datasets.EPISODES_FILE
    for text, cause in (("{", "JSONDecodeError"), ("{}", "KeyError"), ("[]", "TypeError")):
        sidecar.write_text(text)
        with pytest.raises(ValueError) as error:
            datasets.episode_records(DENSE, tmp_path)
        message = str(error.value)
        assert message.startswith(f"{sidecar} is not a readable record of dataset {DENSE}'s")
        assert f"({cause}: " in message


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"failed_policy": "Random"}, "unknown failed_policy 'Random'; accepted: random, noisy-"),
        ({"overwrite": True}, "gameon/x-v0's folder goes; move it or choose another dataset id"),
        ({"overwrite": False}, "gameon/x-v0's folder goes; move it or choose another dataset id"),
    ],
)
def test_collect_refuses_before_it_collects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: dict, message: str
) -> None:
    """A negative seed was numpy's "expected non-negative integer"; a misspelt failed_policy
    (which the command line's choices catch, but `collect(Args(...))` did not) played the clean
    expert and recorded it under that name; a file where the dataset's folder goes was a
    NotADirectoryError traceback with --overwrite, once every episode was collected, and 'already
    exists' without it."""
    (tmp_path / "gameon").mkdir()
    (tmp_path / "gameon" / "x-v0").write_text("a file")

    def must_not_run(*args: object) -> None:
        raise AssertionError("collected before refusing")

    monkeypatch.setattr(datasets, "run_episode", must_not_run)
    args = datasets.Args(
        env_id="GameOn/Reach-v0",
        dataset_id="gameon/x-v0",
        datasets_path=str(tmp_path),
        episodes_per_skill=1,
        progress=False,
    )
    for name, value in setting.items():
        setattr(args, name, value)
    with pytest.raises(ValueError, match=message):
        datasets.collect(args)


def random_episode(env: gym.Env) -> datasets.Episode:
    """One episode of uniform random actions in `env`, as `write_episodes` takes it."""
    from minari.data_collector.episode_buffer import EpisodeBuffer

    episode = datasets.run_episode(env, "reach the red block", 1, "random", 0.0)
    buffer = EpisodeBuffer(
        id=0,
        observations=episode["observations"],
        actions=episode["actions"],
        rewards=episode["rewards"],
        terminations=episode["terminations"],
        truncations=episode["truncations"],
        infos={"success": episode["successes"]},
    )
    return datasets.Episode(buffer, {}, {})


INFO = datasets.DatasetInfo("GameOn/Reach-v0", "x", "x", "x", "x", {})


def test_write_episodes_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    """A file where the namespace folder goes was a FileExistsError, which the embodiment
    reports as an existing dataset ('pass append=True'); a misspelt `existing` replaced the
    dataset there, as "replace" does."""
    (tmp_path / "gameon").write_text("a file")
    env = gym.make("GameOn/Reach-v0")
    episodes = [random_episode(env)]
    with pytest.raises(ValueError, match=f"cannot write the dataset under {tmp_path / 'gameon'}"):
        datasets.write_episodes(env, "gameon/x-v0", episodes, INFO, tmp_path)
    with pytest.raises(ValueError, match="unknown existing 'apend'; accepted: append, replace, r"):
        datasets.write_episodes(env, "x-v0", episodes, INFO, tmp_path, existing="apend")
    assert tree(tmp_path) == ["gameon"]
    env.close()


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def assert_append_refused(env: gym.Env, dataset_id: str, root: Path, match: str) -> None:
    """Appending an episode of `env` to the dataset is refused, saying `match`, and leaves its
    files as they were; the env is closed."""
    before = contents(root / dataset_id)
    with pytest.raises(ValueError, match=match):
        datasets.write_episodes(env, dataset_id, [random_episode(env)], INFO, root)
    env.close()
    assert contents(root / dataset_id) == before


@pytest.mark.parametrize(
    ("kwargs", "difference"),
    [
        ({"reward_mode": "sparse"}, "reward_mode='dense' there, 'sparse' here"),
        (
            {"reward_mode": "dense", "max_episode_steps": 40},
            "max_episode_steps=100 there, 40 here",
        ),
        (
            {"reward_mode": "dense", "terminate_on_success": False},
            "terminate_on_success not given (the env's default, True) there, False here",
        ),
    ],
)
def test_appending_episodes_played_with_other_env_settings_is_refused(
    root: Path, tmp_path: Path, kwargs: dict, difference: str
) -> None:
    """Sparse-reward episodes were appended to a dense-reward dataset without a word: one dataset
    held rewards of two meanings, and its env spec described only the first."""
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    before = contents(tmp_path / DENSE)
    env = gym.make("GameOn/Reach-v0", **kwargs)
    with pytest.raises(ValueError) as error:
        datasets.write_episodes(env, DENSE, [random_episode(env)], INFO, tmp_path)
    env.close()
    message = str(error.value)
    assert message.startswith(
        f"cannot append to dataset {DENSE} at {tmp_path / DENSE}: its episodes were played with "
        f"other env settings than these ({difference}); "
    )
    assert message.endswith(
        "write these episodes to a new dataset id, or replace the dataset (existing='replace', "
        "or collect's --overwrite)"
    )
    assert contents(tmp_path / DENSE) == before


@pytest.mark.parametrize(
    "kwargs",
    [
        {"terminate_on_success": True},
        {"obs_mode": "state"},
        {"blocks": ["red", "green", "blue"]},  # the default 3 blocks, named
    ],
)
def test_appending_episodes_with_a_kwarg_given_at_its_default_is_accepted(
    root: Path, tmp_path: Path, kwargs: dict
) -> None:
    """A kwarg given at the env's default on one side and left out on the other means the same
    episodes; such an append was refused as "other env settings"."""
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    env = gym.make("GameOn/Reach-v0", reward_mode="dense", **kwargs)
    datasets.write_episodes(env, DENSE, [random_episode(env)], INFO, tmp_path)
    env.close()
    import minari

    data = datasets.dataset_dir(DENSE, tmp_path) / "data"
    assert minari.MinariDataset(data).total_episodes == 3


def test_appending_to_a_dataset_from_before_recorded_env_kwargs_records_them(
    root: Path, tmp_path: Path
) -> None:
    """A dataset written before eval env specs carried the env's kwargs stores the bare env id's
    registered spec (sparse rewards): appending kept it, so `recover_environment(eval_env=True)`
    still made a sparse-reward env for the dense rewards. Its env spec always had the kwargs: the
    new episodes are checked against those, and the eval env spec takes them."""
    import minari

    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    data = datasets.dataset_dir(DENSE, tmp_path) / "data"
    metadata = json.loads((data / "metadata.json").read_text())
    metadata["eval_env_spec"] = gym.spec("GameOn/Reach-v0").to_json()
    (data / "metadata.json").write_text(json.dumps(metadata))
    sparse = gym.make("GameOn/Reach-v0", reward_mode="sparse")
    assert_append_refused(sparse, DENSE, tmp_path, "reward_mode='dense' there, 'sparse' here")

    dense = gym.make("GameOn/Reach-v0", reward_mode="dense")
    datasets.write_episodes(dense, DENSE, [random_episode(dense)], INFO, tmp_path)
    dense.close()
    dataset = minari.MinariDataset(data)
    assert dataset.total_episodes == 3
    assert dataset.storage.metadata["eval_env_spec"] == metadata["env_spec"]
    env = dataset.recover_environment(eval_env=True)
    assert env.unwrapped.reward_mode == "dense"
    env.close()


def test_ctrl_c_on_the_command_line_is_a_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a traceback: a line, and 130 as a shell reports SIGINT."""

    def interrupted(args: datasets.Args) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets, "collect", interrupted)
    try:
        with pytest.raises(SystemExit) as exit_:
            datasets.main(datasets.Args())
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C left main as a KeyboardInterrupt (a traceback)")
    assert exit_.value.code == 130
    assert capsys.readouterr().err == (
        f"{datasets.PROG}: interrupted (a dataset is written whole or not at all)\n"
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--dataset-id", "no version"], "malformed dataset id 'no version'; use (namespace/)"),
        (
            ["--dataset-id", "gameon/stack-v01"],
            "dataset id 'gameon/stack-v01' writes its version with leading zeros; use "
            "gameon/stack-v1 (one id per version)",
        ),
        (["--env-id", "Nope-v0"], "unknown env id 'Nope-v0'"),
        (
            ["--episodes-per-skill", "0"],
            "episodes_per_skill must be >= 1, got 0 (see --episodes-per-skill in",
        ),
        (["--datasets-path", "file"], "cannot write the dataset under "),
        (["--seed", "-1"], "seed must be >= 0, got -1 (see --seed in --help)"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(
    arguments: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("a file, not a folder")
    result = subprocess.run(
        [sys.executable, "-m", "gameon.baselines.datasets", "--episodes-per-skill", "1"]
        + arguments,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"{datasets.PROG}: error: {message}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert tree(tmp_path) == ["file"]


@pytest.mark.parametrize("space", ["observation_space", "action_space"])
def test_appending_episodes_of_other_spaces_is_refused(
    root: Path, tmp_path: Path, space: str
) -> None:
    """Actions of another shape were appended unchecked, leaving a dataset `load` could not read
    (a wrapper can change a space and keep the env's spec); other observations were refused
    naming only the last part of the dataset id."""
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    before = contents(tmp_path / DENSE)
    env = gym.make("GameOn/Reach-v0", reward_mode="dense")
    episode = random_episode(env)
    if space == "action_space":  # as a wrapper would: the env's actions, and so the episode's
        env.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        episode = replace(
            episode, buffer=replace(episode.buffer, actions=episode.buffer.actions[:, :4])
        )
    else:
        state = env.observation_space["state"]
        env.observation_space = gym.spaces.Dict(
            {
                **env.observation_space.spaces,
                "state": gym.spaces.Box(-np.inf, np.inf, (state.shape[0] - 1,)),
            }
        )
        observations = episode.buffer.observations
        observations = {**observations, "state": observations["state"][:, :-1]}
        episode = replace(episode, buffer=replace(episode.buffer, observations=observations))
    with pytest.raises(ValueError) as error:
        datasets.write_episodes(env, DENSE, [episode], INFO, tmp_path)
    env.close()
    what = space.split("_")[0] + "s"
    assert str(error.value).startswith(
        f"cannot append to dataset {DENSE} at {tmp_path / DENSE}: its episodes were played with "
        f"{what} "
    )
    assert contents(tmp_path / DENSE) == before


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("{", "JSONDecodeError"),
        ("{}", "KeyError"),
        ('{"episodes": {"99": {}}}', "records episodes [99] that Minari's data does not have (it "),
    ],
)
def test_appending_to_a_dataset_with_a_damaged_episodes_file_names_it(
    root: Path, tmp_path: Path, text: str, cause: str
) -> None:
    """A broken episodes.json was json's words alone or a KeyError traceback, and episodes
    Minari lacks were named at a path in the hidden staging copy."""
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    sidecar = tmp_path / DENSE / datasets.EPISODES_FILE
    sidecar.write_text(text)
    before = contents(tmp_path / DENSE)
    env = gym.make("GameOn/Reach-v0", reward_mode="dense")
    with pytest.raises(ValueError) as error:
        datasets.write_episodes(env, DENSE, [random_episode(env)], INFO, tmp_path)
    env.close()
    message = str(error.value)
    assert message.startswith(f"cannot append to dataset {DENSE}: {sidecar} ")
    assert cause in message
    assert message.endswith("; repair that file, or write these episodes to a new dataset id")
    assert contents(tmp_path / DENSE) == before


def test_collect_refuses_a_dataset_left_aside_by_an_interrupted_overwrite_before_it_collects(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dataset sat in its hidden .old folder, so collect saw no dataset, collected every
    episode, and only then did the writer put it back and refuse it as existing."""
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    folder = tmp_path / DENSE
    folder.rename(folder.with_name(f".{folder.name}.old"))

    def must_not_run(*args: object) -> None:
        raise AssertionError("collected before refusing")

    monkeypatch.setattr(datasets, "run_episode", must_not_run)
    args = datasets.Args(
        env_id="GameOn/Reach-v0",
        dataset_id=DENSE,
        datasets_path=str(tmp_path),
        episodes_per_skill=1,
        progress=False,
    )
    with pytest.raises(FileExistsError) as error:
        datasets.collect(args)
    old = folder.with_name(f".{folder.name}.old")
    assert str(error.value) == (
        f"dataset {DENSE} already exists at {old}, where an interrupted overwrite left it; pass "
        "--overwrite to replace it or choose another --dataset-id"
    )


def _without_final_observation(buffer: EpisodeBuffer) -> EpisodeBuffer:
    return replace(buffer, observations={k: v[:-1] for k, v in buffer.observations.items()})


@pytest.mark.parametrize(
    ("spoil", "problem"),
    [
        (_without_final_observation, "has 9 actions but 9 observations['state']"),
        (lambda b: replace(b, rewards=b.rewards[:-1]), "has 9 actions but 8 rewards"),
        (
            lambda b: replace(b, infos={"success": b.infos["success"][:-1]}),
            "has 9 actions but 8 infos['success']",
        ),
        (
            lambda b: replace(b, actions=b.actions[:, :4]),
            "has actions of shape (4,), not the env's (5,)",
        ),
        (
            lambda b: replace(
                b, observations={**b.observations, "state": b.observations["state"][:, :-1]}
            ),
            "has observations['state'] of shape ",
        ),
        (
            lambda b: replace(
                b, observations={**b.observations, "state": b.observations["state"] * np.nan}
            ),
            "has observations['state'] that are not finite numbers",
        ),
    ],
)
def test_an_episode_whose_arrays_disagree_is_refused_before_anything_is_written(
    root: Path,
    tmp_path: Path,
    spoil: Callable[[EpisodeBuffer], EpisodeBuffer],
    problem: str,
) -> None:
    """Such episodes were written without a word: alone, `load` refused them later; appended
    (a 4-block episode to a 3-block dataset), the whole dataset could no longer be read, its
    good version already gone."""
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    before = contents(tmp_path / DENSE)
    env = gym.make("GameOn/Reach-v0", reward_mode="dense", max_episode_steps=9)
    episode = random_episode(env)
    assert len(episode.buffer.actions) == 9
    bad = datasets.Episode(spoil(episode.buffer), {}, {})
    for dataset_id in (DENSE, "gameon/new-v0"):
        with pytest.raises(ValueError) as error:
            datasets.write_episodes(env, dataset_id, [episode, bad], INFO, tmp_path)
        assert str(error.value).startswith(f"episode 1 of those to write {problem}")
    env.close()
    assert contents(tmp_path / DENSE) == before
    assert not (tmp_path / "gameon" / "new-v0").exists()


def test_pixel_observations_are_stored_as_the_env_returned_them(tmp_path: Path) -> None:
    """Minari JPEG-encodes image observations unless told not to: every stored frame differed
    from the env's (up to 112 of 255 at 84x84), and nothing said so."""
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    env = gym.make("GameOn/Reach-v0", obs_mode="state+pixels", pixel_size=32, max_episode_steps=5)
    observation, _ = env.reset(seed=3)
    observations, actions = [observation], []
    for _ in range(5):
        actions.append(env.action_space.sample())
        observations.append(env.step(actions[-1])[0])
    stacked = {key: np.stack([o[key] for o in observations]) for key in observation}
    buffer = EpisodeBuffer(
        observations=stacked,
        actions=np.stack(actions),
        rewards=np.zeros(5),
        terminations=np.zeros(5, bool),
        truncations=np.arange(5) == 4,
        infos={},
    )
    datasets.write_episodes(env, "pixels-v0", [datasets.Episode(buffer, {}, {})], INFO, tmp_path)
    env.close()
    stored = next(minari.MinariDataset(tmp_path / "pixels-v0" / "data").iterate_episodes())
    np.testing.assert_array_equal(stored.observations["pixels"], stacked["pixels"])


def test_appending_episodes_played_without_the_dataset_s_wrappers_is_refused(
    tmp_path: Path,
) -> None:
    """The append check compared env id, step limit and kwargs, not the wrappers the spec
    records: unclipped rewards joined a dataset of ClipReward's clipped ones."""
    clipped = gym.wrappers.ClipReward(gym.make("GameOn/Reach-v0", reward_mode="dense"), 0.0, 0.1)
    datasets.write_episodes(clipped, "w-v0", [random_episode(clipped)], INFO, tmp_path)
    clipped.close()
    plain = gym.make("GameOn/Reach-v0", reward_mode="dense")
    match = r"other env settings than these \(additional_wrappers="
    assert_append_refused(plain, "w-v0", tmp_path, match)


def test_an_env_whose_spec_cannot_be_stored_is_refused_in_words(tmp_path: Path) -> None:
    """A wrapper with a function argument was json's bare TypeError from inside Minari."""
    env = gym.wrappers.TransformReward(gym.make("GameOn/Reach-v0"), lambda reward: 2 * reward)
    with pytest.raises(
        ValueError,
        match="the env's spec cannot be stored with the dataset .*its wrappers: TransformReward",
    ):
        datasets.write_episodes(env, "f-v0", [random_episode(env)], INFO, tmp_path)
    env.close()
    assert tree(tmp_path) == []


def test_appending_with_a_render_mode_is_accepted(root: Path, tmp_path: Path) -> None:
    """How an env may be watched does not change its episodes: such an append was refused as
    "episodes that mean different things"."""
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    env = gym.make("GameOn/Reach-v0", reward_mode="dense", render_mode="rgb_array")
    datasets.write_episodes(env, DENSE, [random_episode(env)], INFO, tmp_path)
    env.close()
    assert len(datasets.episode_records(DENSE, tmp_path)) == 3


def test_appending_to_a_dataset_without_its_episodes_file_is_refused(
    root: Path, tmp_path: Path
) -> None:
    """The new episodes.json held the new episodes alone: the old records were dropped while
    Minari's data kept the episodes."""
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    (tmp_path / DENSE / datasets.EPISODES_FILE).unlink()
    env = gym.make("GameOn/Reach-v0", reward_mode="dense")
    assert_append_refused(env, DENSE, tmp_path, "so the records of its 2 episodes would be lost")


def test_a_writer_that_finds_its_namespace_made_meanwhile_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers of new datasets in one new namespace: the second to create it got Minari's
    "Namespace ... already exists" and lost its whole collection."""
    from minari.namespace import create_namespace

    real = datasets.list_local_namespaces
    calls = []

    def another_writer_is_first() -> list[str]:
        calls.append(1)
        if len(calls) == 1:  # as checked, then the other writer creates it
            with datasets.datasets_root(tmp_path):
                create_namespace("race")
            return []
        return real()

    monkeypatch.setattr(datasets, "list_local_namespaces", another_writer_is_first)
    env = gym.make("GameOn/Reach-v0")
    datasets.write_episodes(env, "race/d0-v0", [random_episode(env)], INFO, tmp_path)
    env.close()
    assert (tmp_path / "race" / "d0-v0" / "data").is_dir()


def test_a_failed_fraction_that_rounds_to_no_episode_is_refused(tmp_path: Path) -> None:
    """0.1 of 4 episodes per skill gave a dataset without a failure whose description said
    "failed fraction 0.1"."""
    args = datasets.Args(
        env_id="GameOn/Reach-v0",
        dataset_id="ff/x-v0",
        datasets_path=str(tmp_path),
        episodes_per_skill=4,
        failed_fraction=0.1,
        progress=False,
    )
    with pytest.raises(ValueError, match="failed_fraction 0.1 of 4 episodes per skill rounds to "):
        datasets.collect(args)
    assert tree(tmp_path) == []
