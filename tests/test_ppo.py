"""PPO baseline: the command line, what a tiny run writes, the checkpoint round trip, bad input."""

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

from gameon.baselines import common, ppo
from gameon.baselines.ppo import (
    Args,
    generalised_advantages,
    make_actor,
    make_critic,
    numpy_mlp,
    train,
)
from gameon.evaluation import EvalReport, evaluation_suite
from gameon.policy import Policy, load_checkpoint, load_policy


def tiny_args(run_dir: Path, **overrides: object) -> Args:
    """A training run of a few hundred steps: enough to exercise every stage."""
    settings = {
        "env_id": ENV_ID,
        "reward_mode": "dense",
        "total_timesteps": 512,
        "num_envs": 2,
        "num_steps": 128,
        "num_minibatches": 4,
        "update_epochs": 2,
        "eval_episodes_per_skill": EPISODES_PER_SKILL,
        "run_dir": str(run_dir),
        **overrides,
    }
    return Args(**settings)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Policy, EvalReport]:
    """One tiny run shared by the tests: its summary, and the in-process policy and report."""
    evaluations: list[tuple[Policy, EvalReport, int]] = []
    run_dir = tmp_path_factory.mktemp("ppo") / "run"
    summary = train(tiny_args(run_dir, eval_every=256), on_eval=lambda *e: evaluations.append(e))
    assert [step for _, _, step in evaluations] == [256, 512]
    policy, report, _ = evaluations[-1]
    return summary, policy, report


def test_help_lists_the_options() -> None:
    result = run_help("gameon.baselines.ppo")
    assert result.returncode == 0, result.stderr
    assert "--curriculum" in result.stdout and "--hand-curriculum" in result.stdout
    assert "--env-id" in result.stdout and "--num-minibatches" in result.stdout


def test_tiny_run_writes_logs_eval_checkpoint_and_summary(tiny_run: tuple) -> None:
    summary, _, _ = tiny_run
    run_dir = Path(summary["run_dir"])
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["global_step"] >= 512 and summary["sps"] > 0
    assert json.loads((run_dir / "summary.json").read_text()) == json.loads(json.dumps(summary))

    record = json.loads((run_dir / "eval.json").read_text())
    suite = evaluation_suite(ENV_ID, EPISODES_PER_SKILL)
    assert sum(s["episodes"] for s in record["per_skill"].values()) == len(suite)
    assert len(record["episodes"]) == len(suite)
    assert record["global_step"] == summary["global_step"]
    assert [point["global_step"] for point in summary["evals"]] == [256, 512]

    actor, normalizer, payload = load_checkpoint(summary["checkpoint"])
    assert payload["algo"] == "ppo" and payload["args"]["total_timesteps"] == 512
    assert payload["extra"]["curriculum"]["name"] == summary["curriculum"] == "fixed"
    assert summary["train_episodes"] == 4, "512 steps over 2 envs: two 100-step episodes each"
    assert not actor.squash and normalizer is not None
    observation, _ = gym.make(ENV_ID).reset(seed=0)
    action = load_policy(summary["checkpoint"])(observation)
    assert action.shape == (5,) and np.all(np.abs(action) <= 1.0)


def test_reloaded_policy_acts_and_scores_exactly_as_trained(tiny_run: tuple) -> None:
    assert_reloaded_policy_acts_and_scores_as_trained(*tiny_run)


def test_capture_video_writes_an_mp4(tmp_path: Path) -> None:
    args = tiny_args(
        tmp_path / "run", reward_mode="sparse", total_timesteps=256, eval_episodes_per_skill=1
    )
    args.capture_video = True
    summary = train(args)
    videos = list((tmp_path / "run" / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == [f"eval_{summary['global_step']}.mp4"]
    assert videos[0].stat().st_size > 1000


def test_numpy_copies_act_as_the_torch_actor_and_critic() -> None:
    """Rollouts act through numpy_mlp; its outputs must be the networks' own."""
    torch.manual_seed(0)
    actor, critic = make_actor(12, 5, (64, 64)), make_critic(12, (64, 64))
    for net in (actor.net, critic):
        with torch.no_grad():
            for param in net.parameters():
                param.normal_()
    x = np.random.default_rng(0).standard_normal((3, 12)).astype(np.float32)
    with torch.no_grad():
        expected = (actor(torch.from_numpy(x)).numpy(), critic(torch.from_numpy(x)).numpy())
    np.testing.assert_allclose(numpy_mlp(actor.net)(x), expected[0], atol=1e-5)
    np.testing.assert_allclose(numpy_mlp(critic)(x), expected[1], atol=1e-5)
    with pytest.raises(ValueError, match="Linear and Tanh"):
        numpy_mlp(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()))


def test_same_seed_gives_the_same_run(tmp_path: Path) -> None:
    first = train(tiny_args(tmp_path / "a", total_timesteps=256, eval_episodes_per_skill=1))
    second = train(tiny_args(tmp_path / "b", total_timesteps=256, eval_episodes_per_skill=1))
    actor_a, normalizer_a, _ = load_checkpoint(first["checkpoint"])
    actor_b, normalizer_b, _ = load_checkpoint(second["checkpoint"])
    for name, tensor in actor_a.state_dict().items():
        assert torch.equal(tensor, actor_b.state_dict()[name]), name
    np.testing.assert_array_equal(normalizer_a.mean, normalizer_b.mean)
    assert first["eval"]["episodes"] == second["eval"]["episodes"]


def test_advantages_stop_at_episode_ends() -> None:
    rewards = np.array([[0.0], [1.0], [0.0]], np.float32)
    values = np.array([[0.5], [0.5], [0.5]], np.float32)
    ends = np.array([[0.0], [1.0], [0.0]], np.float32)
    next_value = np.array([2.0], np.float32)
    gamma, lam = 0.9, 0.8
    advantages = generalised_advantages(rewards, values, ends, next_value, gamma, lam)
    last = 0.0 + gamma * 2.0 - 0.5
    ended = 1.0 - 0.5
    first = 0.0 + gamma * 0.5 - 0.5 + gamma * lam * ended
    np.testing.assert_allclose(advantages[:, 0], [first, ended, last], rtol=1e-6)


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
        ({"num_minibatches": 10_000}, "num_minibatches"),
        ({"learning_rate": 0.0}, "learning_rate must be a finite number > 0"),
        ({"gamma": 1.5}, r"gamma must be in \[0, 1\], got 1.5"),
        ({"gae_lambda": float("nan")}, r"gae_lambda must be in \[0, 1\]"),
        ({"clip_coef": -0.2}, "clip_coef must be > 0"),
        ({"target_kl": -1.0}, "target_kl must be > 0"),
        ({"init_log_std": float("nan")}, r"init_log_std must be a number in \[-20, 20\]"),
        ({"seed": -1}, r"seed must be in 0 \.\. 2\*\*32 - 1 = 4294967295, got -1"),
        ({"seed": 2**32}, r"seed must be in 0 \.\. 2\*\*32 - 1 = 4294967295, got 4294967296"),
        ({"curriculum_seed": -2}, "curriculum_seed must be in 0 .* got -2"),
        # minibatches of one transition: its advantage's std is NaN, and so was the policy
        ({"num_steps": 8, "num_minibatches": 16}, "must leave minibatches of 2 or more"),
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
    """Ctrl-C (here on the 200th vector step, env step 400) still reaches the caller, after the
    envs and logs are closed and one line says what is on disk: the evaluation at 256 is."""
    made: list[gym.vector.VectorEnv] = []
    make_envs = common.make_training_envs
    monkeypatch.setattr(
        common, "make_training_envs", lambda *a: made.append(make_envs(*a)) or made[-1]
    )
    calls = iter(range(1_000_000))
    steps = ppo.vector_env_steps

    def interrupt_at_200(info: dict, ended: np.ndarray) -> np.ndarray:
        if next(calls) == 199:
            raise KeyboardInterrupt
        return steps(info, ended)

    monkeypatch.setattr(ppo, "vector_env_steps", interrupt_at_200)
    run_dir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train(tiny_args(run_dir, total_timesteps=2048, eval_every=256))
    assert made[0].unwrapped.closed
    assert capsys.readouterr().err == (
        f"interrupted at env step 398 of 2048: {run_dir} keeps its TensorBoard logs and the "
        "checkpoint.pt and eval.json of the evaluation at step 256, but no summary.json; a run "
        "does not resume, so start it again with a new --run-dir\n"
    )
    assert not (run_dir / "summary.json").exists()
    assert json.loads((run_dir / "eval.json").read_text())["global_step"] == 256
    assert load_checkpoint(run_dir / "checkpoint.pt")[2]["extra"]["global_step"] == 256


def test_a_slow_run_prints_progress_by_the_clock_with_the_time_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """print_every far above the budget would print one line, at the end; a run slower than
    PROGRESS_SECONDS per line (here 0 s) prints one per rollout. The first line names the folder."""
    monkeypatch.setattr(common, "PROGRESS_SECONDS", 0.0)
    train(tiny_args(tmp_path / "run", print_every=1_000_000, eval_episodes_per_skill=1))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"ppo on {ENV_ID}, 512 env steps, run folder {tmp_path / 'run'}"
    progress = [line for line in lines if line.startswith("step ")]
    assert [line.split(" |")[0] for line in progress] == ["step 256", "step 512"]
    assert progress[0].endswith(" s left") and progress[-1].endswith("| 0 s left")


def test_the_first_line_says_the_steps_whole_rollouts_make_and_progress_says_when_none_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The line said 200 env steps for a run that trained 224, and progress before the first
    episode ended read success nan | return nan."""
    monkeypatch.setattr(common, "PROGRESS_SECONDS", 0.0)
    args = tiny_args(tmp_path / "run", total_timesteps=200, num_steps=16, eval_every=0)
    summary = train(args)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"ppo on {ENV_ID}, 224 env steps (total_timesteps rounded up to whole rollouts), "
        f"run folder {tmp_path / 'run'}"
    )
    assert summary["global_step"] == 224
    progress = [line for line in lines if line.startswith("step ")]
    assert progress[0].startswith("step 32 | no episode ended yet | SPS ")
    assert "nan" not in "\n".join(lines)
