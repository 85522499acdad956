"""Test helpers shared by the online learners' tests (test_ppo.py, test_sac.py)."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np

from gameon.evaluation import EvalReport, evaluate
from gameon.policy import Policy, load_policy

ENV_ID = "GameOn/Reach-v0"
EPISODES_PER_SKILL = 2
SUMMARY_KEYS = {
    "run_dir",
    "global_step",
    "sps",
    "env_seconds",
    "learn_seconds",
    "eval",
    "checkpoint",
    "curriculum",
    "curriculum_state",
    "train_episodes",
}


def run_help(module: str) -> subprocess.CompletedProcess[str]:
    """`python -m {module} --help`, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_reloaded_policy_acts_and_scores_as_trained(
    summary: dict, policy: Policy, report: EvalReport
) -> None:
    """The saved checkpoint acts exactly as the live policy and reproduces its final evaluation."""
    reloaded = load_policy(summary["checkpoint"])
    env = gym.make(ENV_ID)
    observations = [env.reset(seed=seed)[0] for seed in range(5)]
    for observation in observations:
        np.testing.assert_array_equal(policy(observation), reloaded(observation))
    batch = {key: np.stack([o[key] for o in observations]) for key in observations[0]}
    np.testing.assert_array_equal(policy(batch), reloaded(batch))

    again = evaluate(
        reloaded,
        ENV_ID,
        episodes_per_skill=EPISODES_PER_SKILL,
        env_kwargs={"reward_mode": "dense"},
    )
    assert again.episodes == report.episodes
    assert again.to_dict()["episodes"] == summary["eval"]["episodes"]
