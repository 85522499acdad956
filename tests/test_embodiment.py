"""The embodiment: tasks run as judged skill sequences in one episode, recorded to Minari."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("minari")
pytest.importorskip("h5py", reason="Minari's HDF5 storage needs h5py (minari[hdf5])")

from gameon.baselines import datasets  # noqa: E402
from gameon.envs import language  # noqa: E402
from gameon.experimenter.embodiment import DEFAULT_BUDGETS, Embodiment  # noqa: E402
from gameon.experimenter.skills import LearnedExecutor, default_library  # noqa: E402

TOWER = "build a tower of red, green and blue from the bottom up"
LIFT = "pick up the red block"
REACH = "move the gripper above the blue block"
DATASET = "gameon/embodiment-test-v0"


@pytest.fixture(scope="module")
def embodiment() -> Iterator[Embodiment]:
    with Embodiment() as scripted:
        yield scripted


@pytest.fixture(scope="module")
def batch(embodiment: Embodiment) -> list:
    """Three short scripted episodes: a tower, a lift and a reach."""
    return embodiment.execute_many([TOWER, LIFT, REACH], seeds=[0, 1, 2])


def test_tower_runs_as_two_judged_stacks(batch: list) -> None:
    record = batch[0]
    assert record.instruction == TOWER and record.skill == "tower"
    assert record.skills == [
        "stack the green block on the red block",
        "stack the blue block on the green block",
    ]
    assert [(o.skill, o.instruction, o.executor) for o in record.outcomes] == [
        ("stack", record.skills[0], "scripted"),
        ("stack", record.skills[1], "scripted"),
    ]
    assert all(o.success and 0 < o.steps <= DEFAULT_BUDGETS["stack"] for o in record.outcomes)
    assert record.success
    steps = record.steps
    assert steps == sum(o.steps for o in record.outcomes) == len(record.actions)
    assert (
        record.observations["state"].shape[0] == record.observations["goal"].shape[0] == steps + 1
    )
    assert record.actions.shape == (steps, 5) and np.all(np.abs(record.actions) <= 1.0)
    first = record.outcomes[0].steps
    goals = record.observations["goal"][:-1]
    assert np.all(goals[:first] == language.encode(language.parse(record.skills[0])))
    assert np.all(goals[first:] == language.encode(language.parse(record.skills[1])))
    assert list(np.flatnonzero(record.terminations)) == [first - 1, steps - 1]
    assert not record.truncations.any()
    assert record.episode_return == pytest.approx(sum(o.skill_return for o in record.outcomes))


def test_execution_is_deterministic(embodiment: Embodiment, batch: list) -> None:
    again = embodiment.execute(REACH, seed=2)
    assert np.array_equal(again.actions, batch[2].actions)
    assert again.outcomes == batch[2].outcomes


def test_a_failing_skill_is_judged_and_still_recorded(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from gameon.policy import Actor, flat_size, save_checkpoint

    library = default_library()
    with Embodiment(library=library, skill_budget={"lift": 30}) as embodiment:
        torch.manual_seed(0)
        size = flat_size(embodiment.env.observation_space)
        actor = Actor(size, 5, hidden=(8,))
        path = save_checkpoint(tmp_path / "lift.pt", "bc", "GameOn/Lift-v0", actor, None, {})
        library.replace_executor("lift", LearnedExecutor(str(path)))
        record = embodiment.execute(LIFT, seed=1)
        assert [(o.skill, o.executor, o.success, o.steps) for o in record.outcomes] == [
            ("lift", "learned", False, 30)
        ]
        assert not record.success and record.truncations[-1] and not record.terminations.any()
        embodiment.record([record], DATASET, tmp_path / "data")
    data = datasets.load(DATASET, tmp_path / "data")
    assert data.num_episodes == 1 and data.size == 30
    (saved,) = datasets.episode_records(DATASET, tmp_path / "data").values()
    assert saved["success"] is False and saved["outcomes"][0]["executor"] == "learned"


def test_record_appends_batches_without_loss(
    embodiment: Embodiment, batch: list, tmp_path: Path
) -> None:
    embodiment.record(batch, DATASET, tmp_path)
    more = embodiment.execute_many([LIFT], seeds=[7])
    folder = embodiment.record(more, DATASET, tmp_path)
    embodiment.record(more, DATASET, tmp_path)
    data = datasets.load(DATASET, tmp_path)
    assert data.num_episodes == len(batch) + 2
    assert data.size == sum(r.steps for r in batch) + 2 * more[0].steps
    assert data.env_id == "GameOn/MultiSkill-v0"
    assert sorted(np.unique(data.episodes).tolist()) == list(range(len(batch) + 2))
    records = datasets.episode_records(DATASET, tmp_path)
    assert sorted(records) == list(range(len(batch) + 2))
    expected = [*batch, *more, *more]
    assert [records[i]["instruction"] for i in sorted(records)] == [r.instruction for r in expected]
    assert [records[i]["skill_sequence"] for i in sorted(records)] == [r.skills for r in expected]
    assert records[0]["outcomes"][1]["instruction"] == "stack the blue block on the green block"
    assert records[3] == records[4] and records[3]["policy"] == "embodiment"
    assert sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(".")) == [
        f".{folder.name}.lock"
    ]
    skills = {language.SKILLS[i] for i in np.unique(data.skills)}
    assert skills == {"stack", "lift", "reach"}
    assert json.loads((folder / "data" / "metadata.json").read_text())["total_episodes"] == 5

    with pytest.raises(FileExistsError, match="append=True"):
        embodiment.record(more, DATASET, tmp_path, append=False)


def test_an_interrupted_swap_is_rolled_back(
    embodiment: Embodiment, batch: list, tmp_path: Path
) -> None:
    folder = embodiment.record(batch[2:], DATASET, tmp_path)
    folder.rename(folder.with_name(f".{folder.name}.old"))
    folder.with_name(f".{folder.name}.staging-crashed").mkdir()
    embodiment.record(batch[2:], DATASET, tmp_path)
    assert datasets.load(DATASET, tmp_path).num_episodes == 2
    assert sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(".")) == [
        f".{folder.name}.lock"
    ]


def test_bad_input_names_the_accepted_forms(embodiment: Embodiment, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="accepted: GameOn/Reach-v0"):
        Embodiment(env_id="GameOn/Juggle-v0")
    with pytest.raises(ValueError, match="accepted: reach, lift"):
        Embodiment(skill_budget={"juggle": 10})
    with pytest.raises(ValueError, match="one seed per task"):
        embodiment.execute_many([LIFT, REACH], seeds=[0])
    with pytest.raises(ValueError, match="accepted forms"):
        embodiment.execute("juggle the red block", seed=0)
    with pytest.raises(ValueError, match="malformed dataset id"):
        embodiment.record([], "no version", tmp_path)
    with pytest.raises(ValueError, match="max_episode_steps"):
        Embodiment(skill_budget={"stack": 1500}).plan(TOWER)
