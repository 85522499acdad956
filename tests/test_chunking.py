"""Action chunking: segment-bounded chunk targets, the chunked actor, temporal ensembling, its
checkpoints and a tiny end-to-end BC run."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tyro")
minari = pytest.importorskip("minari")
pytest.importorskip("h5py", reason="Minari's HDF5 storage needs h5py (minari[hdf5])")

from minari.data_collector.episode_buffer import EpisodeBuffer  # noqa: E402

import gameon.policy  # noqa: E402
from gameon.baselines import bc, datasets  # noqa: E402
from gameon.evaluation import evaluate  # noqa: E402
from gameon.policy import (  # noqa: E402
    CHECKPOINT_FORMAT,
    Actor,
    ChunkedActor,
    ChunkingPolicy,
    Normalizer,
    flat_size,
    load_checkpoint,
    load_policy,
    make_policy,
    save_checkpoint,
)

ENV_ID = "GameOn/Reach-v0"
REACH = "gameon/reach-chunks-v0"
SEGMENTED = "gameon/segmented-v0"
SEGMENTS = ((True, 6), (False, 7), (True, None))
"""(success, length) of the segments of each hand-made episode (None: the rest)."""


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny Reach datasets: expert episodes from `collect`, and multi-segment episodes written
    as the embodiment writes them (a termination ends a successful segment, a truncation a
    failed one), with an extra per-step info and per-episode metadata."""
    path = tmp_path_factory.mktemp("datasets")
    datasets.collect(
        datasets.Args(
            env_id=ENV_ID,
            dataset_id=REACH,
            datasets_path=str(path),
            episodes_per_skill=3,
            progress=False,
        )
    )
    env = gym.make(ENV_ID)
    buffers = []
    for episode_id, seed in enumerate((5, 6)):
        episode = datasets.run_episode(env, "reach the red block", seed, "random", 0.0)
        steps = len(episode["actions"])
        terminations, truncations = np.zeros(steps, bool), np.zeros(steps, bool)
        end = -1
        for success, length in SEGMENTS:
            end = steps - 1 if length is None else end + length
            (terminations if success else truncations)[end] = True
        buffers.append(
            EpisodeBuffer(
                id=episode_id,
                seed=seed,
                options={"instruction": "reach the red block"},
                observations=episode["observations"],
                actions=episode["actions"],
                rewards=episode["rewards"],
                terminations=terminations,
                truncations=truncations,
                infos={"success": episode["successes"], "actor": np.zeros(steps, np.uint8)},
            )
        )
    with datasets.datasets_root(path):
        dataset = minari.create_dataset_from_buffers(
            dataset_id=SEGMENTED,
            buffer=buffers,
            env=env,
            eval_env=ENV_ID,
            algorithm_name="test",
            author="test",
            author_email="n/a",
            code_permalink="n/a",
            description="multi-segment episodes",
        )
        dataset.storage.update_metadata({"gameon": {"env_id": ENV_ID}})
        dataset.storage.update_episode_metadata(
            [{"relabelled": False}, {"relabelled": True}], [0, 1]
        )
    env.close()
    return path


def test_load_splits_episodes_into_segments(root: Path) -> None:
    expert = datasets.load(REACH, root)
    assert expert.num_segments == expert.num_episodes == 3, "collect: one segment per episode"
    assert expert.segment_success.all()

    data = datasets.load(SEGMENTED, root)
    assert data.num_episodes == 2 and data.num_segments == 6
    for episode in (0, 1):
        rows = np.flatnonzero(data.episodes == episode)
        segments = data.segments[rows]
        assert np.all(np.diff(segments) >= 0), "segments are contiguous and numbered in order"
        lengths = [int(np.sum(segments == s)) for s in np.unique(segments)]
        assert lengths[:2] == [6, 7] and sum(lengths) == len(rows)
        success = [bool(data.segment_success[rows][segments == s][0]) for s in np.unique(segments)]
        assert success == [ok for ok, _ in SEGMENTS]
    assert len(np.unique(data.segments)) == 6


def test_chunk_targets_stay_in_their_segment_and_are_masked_at_its_end(root: Path) -> None:
    rows, mask = datasets.chunk_indices(np.array([0, 0, 0, 1, 1, 2]), 3)
    np.testing.assert_array_equal(
        rows, [[0, 1, 2], [1, 2, 2], [2, 2, 2], [3, 4, 4], [4, 4, 4], [5, 5, 5]]
    )
    np.testing.assert_array_equal(
        mask,
        [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 0, 0]],
    )
    with pytest.raises(ValueError, match="contiguous"):
        datasets.chunk_indices(np.array([0, 1, 0]), 2)

    data = datasets.load(SEGMENTED, root)
    rows, mask = datasets.chunk_indices(data.segments, 8)
    assert np.all(data.segments[rows] == data.segments[:, None]), "never crosses a boundary"
    assert np.all(mask[:, 0]) and np.all(rows[:, 0] == np.arange(data.size))
    ends = np.flatnonzero(np.diff(data.segments)) + 1  # first rows of the next segments
    for last in np.concatenate((ends, [data.size])) - 1:
        assert mask[last].sum() == 1, "a segment's last step has only its own action"
    real = rows[mask]
    assert np.all(real == (np.arange(data.size)[:, None] + np.arange(8))[mask])


def test_success_only_keeps_the_successful_segments(root: Path, tmp_path: Path) -> None:
    data = datasets.load(SEGMENTED, root)
    kept = data.subset(data.segment_success)
    assert kept.num_segments == 4 and kept.segment_success.all()
    assert kept.size == int(data.segment_success.sum())
    assert np.all(np.isin(kept.segments, data.segments[~data.segment_success], invert=True))
    args = bc.Args(
        dataset_id=SEGMENTED,
        datasets_path=str(root),
        num_updates=20,
        batch_size=16,
        log_every=10,
        eval_episodes_per_skill=1,
        success_only=True,
        run_dir=str(tmp_path / "bc"),
    )
    summary = bc.train(args)
    assert summary["transitions"] == kept.size and summary["segments"] == 4
    assert summary["success_only"] is True


class FakeChunks:
    """Stands in for the network: the chunk at step t holds 0.1 t + 0.01 j at offset j."""

    def __init__(self, gripper: list[list[float]] | None = None) -> None:
        self.step, self.gripper = 0, gripper

    def __call__(self, x: np.ndarray) -> np.ndarray:
        t, self.step = self.step, self.step + 1
        chunk = np.stack([[0.1 * t + 0.01 * j, 0.0] for j in range(3)])
        if self.gripper is not None:
            chunk[:, 1] = self.gripper[t]
        return chunk


def small_policy(binary_gripper: bool, decay: float, chunks: FakeChunks) -> ChunkingPolicy:
    actor = ChunkedActor(
        4, 2, (8,), chunk_length=3, binary_gripper=binary_gripper, ensemble_decay=decay
    )
    policy = ChunkingPolicy(actor, None)
    policy.chunk = chunks  # the known fake network
    return policy


def fake_observation(goal: float = 0.0) -> dict[str, np.ndarray]:
    return {"state": np.zeros(1), "goal": np.full(2, goal)}


def test_temporal_ensembling_is_the_hand_computed_weighted_average(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gameon.policy, "flat_observation", lambda o: np.zeros(4, np.float32))
    policy = small_policy(False, 0.5, FakeChunks())
    w = np.exp(-0.5 * np.arange(3))  # oldest prediction first, as ACT weighs them
    first = policy(fake_observation())[0]
    assert first == pytest.approx(0.0)  # step 0: chunk 0's offset 0
    second = policy(fake_observation())[0]
    assert second == pytest.approx((w[0] * 0.01 + w[1] * 0.1) / w[:2].sum(), rel=1e-6)
    third = policy(fake_observation())[0]
    expected = (w[0] * 0.02 + w[1] * 0.11 + w[2] * 0.2) / w.sum()
    assert third == pytest.approx(expected, rel=1e-6)
    fourth = policy(fake_observation())[0]  # chunk 0 has fallen out of the window
    expected = (w[0] * 0.12 + w[1] * 0.21 + w[2] * 0.3) / w.sum()
    assert fourth == pytest.approx(expected, rel=1e-6)

    # the gripper ensembles probabilities of "closed", then acts -1 or +1 at 0.5
    gripper = [[0.9, 0.9, 0.9], [0.2, 0.2, 0.2], [0.1, 0.1, 0.1]]
    policy = small_policy(True, 0.0, FakeChunks(gripper))
    acted = [policy(fake_observation())[1] for _ in range(3)]
    assert acted == [1.0, 1.0, -1.0]  # mean probabilities 0.9, 0.55, 0.4


def test_reset_and_a_new_goal_clear_the_ensemble(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gameon.policy, "flat_observation", lambda o: np.zeros(4, np.float32))
    policy = small_policy(False, 0.0, FakeChunks())
    policy(fake_observation())
    policy(fake_observation())
    policy.reset()
    assert policy(fake_observation())[0] == pytest.approx(0.2), "only the new chunk counts"
    assert policy(fake_observation(goal=1.0))[0] == pytest.approx(0.3), "a new goal resets"


def test_binary_gripper_acts_exactly_minus_one_or_one() -> None:
    env = gym.make(ENV_ID)
    size = flat_size(env.observation_space)
    torch.manual_seed(0)
    actor = ChunkedActor(size, 5, (32,), chunk_length=4)
    with torch.no_grad():
        actor.net[-1].bias[4::5] = torch.tensor([3.0, -3.0, 3.0, -3.0])  # a varied gripper
    policy = make_policy(actor, None)
    grippers = set()
    for seed in range(5):
        observation, _ = env.reset(seed=seed)
        policy.reset()
        for _ in range(10):
            action = policy(observation)
            assert action.shape == (5,) and action.dtype == np.float32
            assert np.all(np.abs(action) <= 1.0)
            grippers.add(float(action[-1]))
            observation, *_ = env.step(action)
    assert grippers <= {-1.0, 1.0}


def test_one_step_chunks_without_binary_gripper_act_as_the_plain_actor() -> None:
    env = gym.make(ENV_ID)
    size = flat_size(env.observation_space)
    torch.manual_seed(1)
    plain = Actor(size, 5, (32, 32), squash=True)
    chunked = ChunkedActor(size, 5, (32, 32), chunk_length=1, binary_gripper=False)
    chunked.load_state_dict(plain.state_dict())  # the same layers
    normalizer = Normalizer.zeros(size)
    plain_policy = make_policy(plain, normalizer)
    chunked_policy = make_policy(chunked, normalizer)
    plain_policy.reset()  # every policy has one; the plain actor's does nothing
    for seed in range(3):
        observation, _ = env.reset(seed=seed)
        np.testing.assert_allclose(
            chunked_policy(observation), plain_policy(observation), rtol=1e-5, atol=1e-6
        )


def test_chunked_checkpoint_round_trips(tmp_path: Path) -> None:
    env = gym.make(ENV_ID)
    size = flat_size(env.observation_space)
    torch.manual_seed(2)
    actor = ChunkedActor(size, 5, (16,), chunk_length=5, ensemble_decay=0.25)
    normalizer = Normalizer.zeros(size)
    path = save_checkpoint(tmp_path / "c.pt", "bc", ENV_ID, actor, normalizer, {})
    loaded, loaded_normalizer, payload = load_checkpoint(path)
    assert payload["format"] == CHECKPOINT_FORMAT and payload["actor_kind"] == "chunked"
    assert isinstance(loaded, ChunkedActor)
    assert (loaded.chunk_length, loaded.binary_gripper, loaded.ensemble_decay) == (5, True, 0.25)
    for key, value in actor.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)

    live, again = make_policy(actor, normalizer), make_policy(loaded, normalizer)
    reloaded = load_policy(path)
    assert isinstance(reloaded, ChunkingPolicy) and reloaded.ensemble_decay == 0.25
    observation, _ = env.reset(seed=0)
    for _ in range(8):
        action = live(observation)
        np.testing.assert_array_equal(action, again(observation))
        np.testing.assert_array_equal(action, reloaded(observation))
        observation, *_ = env.step(action)
    # every make_policy call gives a policy with a buffer of its own
    fresh = make_policy(loaded, normalizer)
    first = fresh(observation)
    np.testing.assert_array_equal(first, make_policy(actor, normalizer)(observation))
    live.reset()
    np.testing.assert_array_equal(live(observation), first)


def test_an_interrupted_checkpoint_save_leaves_the_earlier_file_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interruption while torch.save wrote left a half-written checkpoint.pt.tmp beside the
    checkpoint (and the rename was not synced)."""
    size = flat_size(gym.make(ENV_ID).observation_space)
    actor, normalizer = ChunkedActor(size, 5, (16,)), Normalizer.zeros(size)
    path = save_checkpoint(tmp_path / "checkpoint.pt", "bc", ENV_ID, actor, normalizer, {})
    before = path.read_bytes()

    def interrupted_save(payload: object, target: object) -> None:
        if isinstance(target, (str, Path)):
            target = open(target, "wb")  # noqa: SIM115  (left open, as a killed writer leaves it)
        target.write(before[: len(before) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, "bc", ENV_ID, actor, normalizer, {"second": True})
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]
    assert path.read_bytes() == before


def test_old_format_checkpoint_still_loads(tmp_path: Path) -> None:
    env = gym.make(ENV_ID)
    size = flat_size(env.observation_space)
    actor = Actor(size, 5, (16,), squash=True)
    normalizer = Normalizer.zeros(size)
    payload = {  # what save_checkpoint wrote before chunked actors (format v2)
        "format": "gameon-policy-v2",
        "algo": "bc",
        "env_id": ENV_ID,
        "gameon_version": "0.1.0",
        "obs_size": size,
        "action_size": 5,
        "hidden": [16],
        "squash": True,
        "actor": actor.state_dict(),
        "normalizer": normalizer.to_dict(),
        "args": {},
        "extra": {},
    }
    torch.save(payload, tmp_path / "old.pt")
    loaded, _, _ = load_checkpoint(tmp_path / "old.pt")
    assert type(loaded) is Actor
    policy = load_policy(tmp_path / "old.pt")
    observation, _ = env.reset(seed=0)
    np.testing.assert_array_equal(policy(observation), make_policy(actor, normalizer)(observation))
    policy.reset()
    batch = {key: np.stack([value, value]) for key, value in observation.items()}
    assert policy(batch).shape == (2, 5), "plain actors still act on batches"


@pytest.mark.parametrize("kind", ["mlp", "chunked"])
def test_a_policy_in_a_scene_of_other_blocks_says_so(tmp_path: Path, kind: str) -> None:
    env = gym.make(ENV_ID)
    size = flat_size(env.observation_space)
    actor = Actor(size, 5, (16,)) if kind == "mlp" else ChunkedActor(size, 5, (16,), 4)
    path = save_checkpoint(tmp_path / "p.pt", "bc", ENV_ID, actor, Normalizer.zeros(size), {})
    observation, _ = gym.make(ENV_ID, blocks=4).reset(seed=0)
    with pytest.raises(
        ValueError,
        match=r"trained on a state of 80 numbers \(a scene of 3 "
        r"blocks\); this env's state has 104 \(a scene of 4 blocks\)",
    ):
        load_policy(path)(observation)


def test_checkpoints_load_policy_cannot_act_say_why(tmp_path: Path) -> None:
    env = gym.make(ENV_ID)
    size = flat_size(env.observation_space)
    actor = Actor(size, 9, (16,))
    args = {"coded_skills": "templates", "coded_max_steps": 40}
    coded = save_checkpoint(tmp_path / "coded.pt", "ppo", ENV_ID, actor, None, args)
    with pytest.raises(ValueError, match="trained with coded actions .*CodedActions"):
        load_policy(coded)
    payload = torch.load(coded, weights_only=False)
    torch.save({**payload, "format": "gameon-policy-v1"}, tmp_path / "v1.pt")
    with pytest.raises(ValueError, match="is a gameon-policy-v1 checkpoint; this version reads"):
        load_policy(tmp_path / "v1.pt")
    torch.save({k: v for k, v in payload.items() if k != "normalizer"}, tmp_path / "cut.pt")
    with pytest.raises(ValueError, match="checkpoint without its 'normalizer' entry"):
        load_policy(tmp_path / "cut.pt")


def test_evaluate_resets_the_policy_at_every_episode() -> None:
    class Counting:
        def __init__(self) -> None:
            self.resets, self.steps = 0, 0

        def reset(self) -> None:
            self.resets += 1

        def __call__(self, observation: dict[str, np.ndarray]) -> np.ndarray:
            self.steps += 1
            return np.zeros(5, np.float32)

    policy = Counting()
    report = evaluate(policy, ENV_ID, episodes_per_skill=2)
    assert policy.resets == 2 and policy.steps == sum(e.length for e in report.episodes)
    evaluate(lambda observation: np.zeros(5, np.float32), ENV_ID, episodes_per_skill=1)


def test_tiny_chunked_bc_run_trains_and_evaluates(root: Path, tmp_path: Path) -> None:
    args = bc.Args(
        dataset_id=REACH,
        datasets_path=str(root),
        num_updates=60,
        batch_size=32,
        log_every=20,
        eval_episodes_per_skill=2,
        chunk_length=4,
        ensemble_decay=0.1,
        run_dir=str(tmp_path / "bc"),
    )
    summary = bc.train(args)
    run_dir = Path(summary["run_dir"])
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["args"]["chunk_length"] == 4 and saved["args"]["binary_gripper"] is True
    assert saved["chunk_length"] == 4 and saved["ensemble_decay"] == 0.1
    assert set(saved["final_losses"]) == {"actor_loss", "continuous_loss", "gripper_loss"}
    assert all(np.isfinite(v) for v in saved["final_losses"].values())
    assert len(json.loads((run_dir / "eval.json").read_text())["episodes"]) == 2
    actor, _, payload = load_checkpoint(run_dir / "checkpoint.pt")
    assert isinstance(actor, ChunkedActor) and actor.chunk_length == 4
    assert payload["ensemble_decay"] == 0.1
    policy = load_policy(run_dir / "checkpoint.pt")
    again = evaluate(policy, ENV_ID, episodes_per_skill=2)
    assert [e.success for e in again.episodes] == [
        e["success"] for e in saved["eval"]["episodes"]
    ], "the reloaded policy reproduces the run's evaluation"


def test_next_observations_keep_the_transition_s_own_goal(tmp_path: Path) -> None:
    """A skill sequence records the next skill's goal in a segment's last observation (as the
    embodiment does); the transition's next observation must still carry its own goal, so that
    IQL's bootstrap values the task the step was taken for."""
    env = gym.make("GameOn/MultiSkill-v0")
    observation, _ = env.reset(seed=0, options={"instruction": "pick up the red block"})
    observations, actions, truncations = [observation], [], []
    for instruction in ("pick up the red block", "move the gripper above the blue block"):
        observations[-1] = env.unwrapped.set_instruction(instruction)
        for _ in range(3):
            actions.append(np.zeros(5, np.float32))
            observations.append(env.step(actions[-1])[0])
            truncations.append(False)
        truncations[-1] = True
    steps = len(actions)
    buffer = EpisodeBuffer(
        id=0,
        seed=0,
        options={},
        observations={key: np.stack([o[key] for o in observations]) for key in ("state", "goal")},
        actions=np.stack(actions),
        rewards=np.zeros(steps),
        terminations=np.zeros(steps, bool),
        truncations=np.array(truncations),
        infos={"success": np.zeros(steps, bool)},
    )
    with datasets.datasets_root(tmp_path):
        dataset = minari.create_dataset_from_buffers(
            dataset_id="gameon/two-skills-v0",
            buffer=[buffer],
            env=env,
            eval_env="GameOn/MultiSkill-v0",
            algorithm_name="test",
            author="test",
            author_email="n/a",
            code_permalink="n/a",
            description="a skill sequence",
        )
        dataset.storage.update_metadata({"gameon": {"env_id": "GameOn/MultiSkill-v0"}})
    env.close()

    data = datasets.load("gameon/two-skills-v0", tmp_path)
    state = slice(0, env.observation_space["state"].shape[0])
    goal = slice(state.stop, state.stop + env.observation_space["goal"].shape[0])
    np.testing.assert_array_equal(data.next_observations[:, goal], data.observations[:, goal])
    np.testing.assert_array_equal(data.next_observations[:-1, state], data.observations[1:, state])
    assert data.timeouts[2] and not data.terminals[2], "the first skill's last step bootstraps"


@pytest.mark.parametrize("binary_gripper", [True, False])
def test_a_warm_start_across_gripper_readings_is_refused(tmp_path: Path, binary_gripper) -> None:
    """The same layers read as a logit of "closed" or as a squashed command: continuing one as
    the other would silently flip what the gripper output means."""
    saved = ChunkedActor(20, 5, hidden=(8,), chunk_length=2, binary_gripper=binary_gripper)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, "bc", ENV_ID, saved, None, {})
    other = ChunkedActor(20, 5, hidden=(8,), chunk_length=2, binary_gripper=not binary_gripper)
    with pytest.raises(ValueError, match="train on with the binary_gripper setting it was"):
        gameon.policy.warm_start(other, path)
    same = ChunkedActor(20, 5, hidden=(8,), chunk_length=2, binary_gripper=binary_gripper)
    gameon.policy.warm_start(same, path)
    for name, value in saved.state_dict().items():
        assert torch.equal(same.state_dict()[name], value), name
