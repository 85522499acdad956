"""SAC baseline: the command line, what a tiny run writes, the checkpoint round trip, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    ENV_ID,
    EPISODES_PER_SKILL,
    SUMMARY_KEYS,
    assert_reloaded_policy_acts_and_scores_as_trained,
    run_help,
)

from gameon.baselines import common, sac
from gameon.baselines.sac import (
    Args,
    QNetwork,
    ReplayBuffer,
    SquashedGaussianPolicy,
    expert_demos,
    sample_batch,
    train,
)
from gameon.evaluation import EvalReport, evaluation_suite
from gameon.policy import Policy, load_checkpoint, load_policy


def tiny_args(run_dir: Path, **overrides: object) -> Args:
    """A run of a few hundred steps with learning from step 100: every stage is exercised."""
    settings = {
        "env_id": ENV_ID,
        "total_timesteps": 300,
        "num_envs": 2,
        "reward_mode": "dense",
        "learning_starts": 100,
        "batch_size": 64,
        "eval_episodes_per_skill": EPISODES_PER_SKILL,
        "run_dir": str(run_dir),
        **overrides,
    }
    return Args(**settings)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Policy, EvalReport]:
    """One tiny run shared by the tests: its summary, and the in-process policy and report."""
    evaluations: list[tuple[Policy, EvalReport, int]] = []
    run_dir = tmp_path_factory.mktemp("sac") / "run"
    summary = train(tiny_args(run_dir, eval_every=200), on_eval=lambda *e: evaluations.append(e))
    assert [step for _, _, step in evaluations] == [200, 300]
    policy, report, _ = evaluations[-1]
    return summary, policy, report


def test_help_lists_the_options() -> None:
    result = run_help("gameon.baselines.sac")
    assert result.returncode == 0, result.stderr
    assert "--curriculum" in result.stdout and "--hand-curriculum" in result.stdout
    assert "--env-id" in result.stdout and "--updates-per-step" in result.stdout


def test_tiny_run_writes_logs_eval_checkpoint_and_summary(tiny_run: tuple) -> None:
    summary, _, _ = tiny_run
    run_dir = Path(summary["run_dir"])
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["global_step"] == 300 and summary["sps"] > 0
    assert summary["updates"] == (300 - 100) // 2  # one per vector step after learning_starts
    assert json.loads((run_dir / "summary.json").read_text()) == json.loads(json.dumps(summary))

    record = json.loads((run_dir / "eval.json").read_text())
    suite = evaluation_suite(ENV_ID, EPISODES_PER_SKILL)
    assert sum(s["episodes"] for s in record["per_skill"].values()) == len(suite)
    assert len(record["episodes"]) == len(suite)
    assert [point["global_step"] for point in summary["evals"]] == [200, 300]

    actor, normalizer, payload = load_checkpoint(summary["checkpoint"])
    assert payload["algo"] == "sac" and actor.squash and normalizer is not None
    assert payload["extra"]["curriculum"]["name"] == summary["curriculum"] == "fixed"
    assert summary["train_episodes"] == 2, "300 steps over 2 envs: one 100-step episode each"
    observation, _ = gym.make(ENV_ID).reset(seed=0)
    action = load_policy(summary["checkpoint"])(observation)
    assert action.shape == (5,) and np.all(np.abs(action) <= 1.0)


def test_reloaded_policy_acts_and_scores_exactly_as_trained(tiny_run: tuple) -> None:
    assert_reloaded_policy_acts_and_scores_as_trained(*tiny_run)


def test_policy_samples_squashed_actions_around_the_checkpointed_mean() -> None:
    torch.manual_seed(0)
    net = SquashedGaussianPolicy(obs_size=7, action_size=3, hidden=(16, 16))
    obs = torch.randn(4096, 7)
    with torch.no_grad():
        action, log_prob = net.sample(obs)
        deterministic = net.actor(obs)
    assert action.shape == (4096, 3) and log_prob.shape == (4096,)
    assert action.abs().max() < 1.0 and torch.isfinite(log_prob).all()
    assert deterministic.abs().max() < 1.0
    assert "log_std.weight" not in net.actor.state_dict()


def test_replay_buffer_wraps_around_and_keeps_the_newest() -> None:
    buffer = ReplayBuffer.allocate(capacity=5, obs_size=2, action_size=1)
    for start in range(0, 8, 2):
        rows = np.arange(start, start + 2, dtype=np.float32)
        obs = np.stack([rows, rows], axis=1)
        buffer.add(obs, obs + 100, rows[:, None], rows, np.array([False, True]))
    assert buffer.size == 5 and buffer.position == 3
    assert sorted(buffer.rewards.tolist()) == [3.0, 4.0, 5.0, 6.0, 7.0]
    np.testing.assert_array_equal(buffer.next_obs[:, 0], buffer.obs[:, 0] + 100)
    batch = buffer.sample(np.random.default_rng(0), 64)
    np.testing.assert_array_equal(batch.obs[:, 0], batch.rewards)
    np.testing.assert_array_equal(batch.next_obs[:, 1], batch.rewards + 100)
    np.testing.assert_array_equal(batch.terminated, batch.rewards % 2)


def test_batches_draw_the_demo_ratio_from_the_demo_buffer() -> None:
    online, demos = (ReplayBuffer.allocate(10, 1, 1) for _ in range(2))
    for buffer, value in ((online, 0.0), (demos, 1.0)):
        rows = np.full((10, 1), value, np.float32)
        buffer.add(rows, rows, rows, rows[:, 0], np.zeros(10, bool))
    batch = sample_batch(online, demos, np.random.default_rng(0), 64, 0.25)
    assert batch.obs.shape == (64, 1) and batch.rewards.sum() == 16
    assert sample_batch(online, None, np.random.default_rng(0), 64, 0.25).rewards.sum() == 0


def test_expert_demos_are_successful_training_transitions() -> None:
    args = Args(env_id="GameOn/Lift-v0", reward_mode="dense", demo_episodes=2, seed=3)
    demos, success = expert_demos(args)
    assert success == 1.0
    assert demos.size == 2 * 150  # dense training episodes run to the step limit
    assert demos.rewards.max() == 1.0 and not demos.terminated.any()
    np.testing.assert_array_equal(demos.obs[1:150], demos.next_obs[:149])


def test_a_run_with_demos_names_them_in_its_summary(tmp_path: Path) -> None:
    args = tiny_args(tmp_path / "run", total_timesteps=200, demo_episodes=1, critic_layer_norm=True)
    summary = train(args)
    assert summary["demo_episodes"] == 1 and summary["demo_success"] == 1.0
    _, _, payload = load_checkpoint(summary["checkpoint"])
    assert payload["args"]["critic_layer_norm"] is True


def test_layer_norm_bounds_q_values_far_from_the_data() -> None:
    """With LayerNorm at its initial unit gain, |Q| <= |w_out| sqrt(width) + |b_out| for any
    input; without it, Q grows with the input."""
    torch.manual_seed(0)
    obs, actions = torch.randn(256, 7), torch.rand(256, 3) * 2 - 1
    plain = QNetwork(7, 3, (32, 32))
    normed = QNetwork(7, 3, (32, 32), layer_norm=True)
    out = normed.net[-1]
    bound = float(out.weight.detach().norm() * 32**0.5 + out.bias.detach().abs())
    with torch.no_grad():
        for scale in (1.0, 1e3, 1e6):
            assert normed(obs * scale, actions).abs().max() <= bound
        assert plain(obs * 1e6, actions).abs().max() > 1e3 * bound


def last_alpha(run_dir: Path) -> float:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    return events.Scalars("losses/alpha")[-1].value


def test_target_entropy_steers_the_temperature(tmp_path: Path) -> None:
    """Above the policy's entropy the temperature rises from its start (0.2); far below, falls."""
    for name, target in (("high", 10.0), ("low", -50.0)):
        train(
            tiny_args(
                tmp_path / name, target_entropy=target, log_every=10, eval_episodes_per_skill=1
            )
        )
    assert last_alpha(tmp_path / "high") > 0.2 > last_alpha(tmp_path / "low")


def test_same_seed_gives_the_same_run(tmp_path: Path) -> None:
    first = train(tiny_args(tmp_path / "a", total_timesteps=200, eval_episodes_per_skill=1))
    second = train(tiny_args(tmp_path / "b", total_timesteps=200, eval_episodes_per_skill=1))
    actor_a, _, _ = load_checkpoint(first["checkpoint"])
    actor_b, _, _ = load_checkpoint(second["checkpoint"])
    for name, tensor in actor_a.state_dict().items():
        assert torch.equal(tensor, actor_b.state_dict()[name]), name
    assert first["eval"]["episodes"] == second["eval"]["episodes"]


def test_unknown_env_id_names_the_registered_ids(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="GameOn/Reach-v0"):
        train(tiny_args(tmp_path / "run", env_id="GameOn/Nope-v0"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"total_timesteps": 0}, "total_timesteps must be >= 1"),
        ({"num_envs": 0}, "num_envs must be >= 1"),
        ({"reward_mode": "shaped"}, "accepted: sparse, dense"),
        ({"vectorization": "threads"}, "accepted: shared, sync, async"),
        ({"curriculum": "random"}, "accepted: fixed, hand, lp"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"demo_episodes": -1}, "demo_episodes must be >= 0"),
        ({"demo_ratio": 1.0}, r"demo_ratio must be in \(0, 1\)"),
        ({"learning_starts": 300}, r"total_timesteps \(300\) must exceed learning_starts \(300\)"),
        ({"buffer_size": 32}, r"batch_size \(64\) must be <= buffer_size \(32\)"),
        ({"batch_size": 512}, r"batch_size \(512\) must be <= .* total_timesteps \(300\)"),
        ({"policy_lr": -1.0}, "policy_lr must be a finite number > 0"),
        ({"q_lr": 0.0}, "q_lr must be a finite number > 0"),
        ({"alpha": 0.0}, "alpha must be a finite number > 0"),
        ({"gamma": 1.01}, r"gamma must be in \[0, 1\]"),
        ({"target_entropy": float("nan")}, "target_entropy must be a finite number"),
        # one critic update after learning_starts: the actor (policy_frequency 2) saved untrained
        (
            {"total_timesteps": 258, "learning_starts": 256, "batch_size": 8},
            r"leaves 1 critic update\(s\) .* fewer than policy_frequency \(2\)",
        ),
        ({"seed": 2**32}, "seed must be in 0 .. 2"),
    ],
)
def test_invalid_args_raise_naming_what_is_accepted(
    tmp_path: Path, overrides: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        train(tiny_args(tmp_path / "run", **overrides))
    assert not (tmp_path / "run").exists()


def test_ctrl_c_closes_the_envs_and_says_what_the_run_folder_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C on the 60th vector step (env step 120), before any evaluation: logs only, which a
    new run refuses as it does a folder with a checkpoint."""
    made: list[gym.vector.VectorEnv] = []
    make_envs = common.make_training_envs
    monkeypatch.setattr(
        common, "make_training_envs", lambda *a: made.append(make_envs(*a)) or made[-1]
    )
    calls = iter(range(1_000_000))
    steps = sac.vector_env_steps

    def interrupt_at_60(info: dict, ended: np.ndarray) -> np.ndarray:
        if next(calls) == 59:
            raise KeyboardInterrupt
        return steps(info, ended)

    monkeypatch.setattr(sac, "vector_env_steps", interrupt_at_60)
    run_dir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train(tiny_args(run_dir))
    assert made[0].unwrapped.closed
    assert capsys.readouterr().err == (
        f"interrupted at env step 118 of 300: {run_dir} keeps its TensorBoard logs, but no "
        "summary.json; a run does not resume, so start it again with a new --run-dir\n"
    )
    assert [path.name.split(".")[0] for path in run_dir.iterdir()] == ["events"]
    monkeypatch.undo()
    logs = {path.name: path.read_bytes() for path in run_dir.iterdir()}
    with pytest.raises(ValueError, match=f"run_dir {run_dir} holds the TensorBoard logs of an "):
        train(tiny_args(run_dir))  # the same run again: its curves would mix with the stopped one's
    assert {path.name: path.read_bytes() for path in run_dir.iterdir()} == logs


def test_a_slow_run_prints_progress_by_the_clock_with_the_time_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """print_every far above the budget would print one line, at the end; a run slower than
    PROGRESS_SECONDS per line (here 0 s) prints one per step. The first line names the folder."""
    monkeypatch.setattr(common, "PROGRESS_SECONDS", 0.0)
    train(tiny_args(tmp_path / "run", print_every=1_000_000))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"sac on {ENV_ID}, 300 env steps, run folder {tmp_path / 'run'}"
    progress = [line for line in lines if line.startswith("step ")]
    assert len(progress) == 150, "one per vector step of 2 envs"
    assert progress[0].startswith("step 2 |") and progress[0].endswith(" s left")
    assert progress[-1].startswith("step 300 |") and progress[-1].endswith("| 0 s left")
