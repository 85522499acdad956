"""`gameon.baselines.datasets` on what a new user gets wrong: reading a path that is not there
creates nothing and says what is missing, and a recovered env plays the dataset's rewards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tyro")
pytest.importorskip("minari")
pytest.importorskip("h5py", reason="Minari's HDF5 storage needs h5py (minari[hdf5])")

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
