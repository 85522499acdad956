"""Throughput cost of CodedActions on GameOn/Stack-v0: bare env steps, the wrapper's continuous
path, env steps inside a coded action, and the start cost of one selection.

Run: MUJOCO_GL=egl python results/coded_actions/throughput.py  (writes throughput.json beside it)
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import gameon.envs  # noqa: F401
from gameon.experimenter.coded_actions import CodedActions
from gameon.experimenter.coded_api import TEMPLATES, scene_message
from gameon.experimenter.sandbox import SandboxedSkill

ENV_ID = "GameOn/Stack-v0"
STEPS = 3000
SELECTIONS = 40
STARTS = 40


def stepping_rate(env: gym.Env, actions: np.ndarray) -> float:
    """Env steps per second stepping the given actions, resetting at episode ends."""
    env.reset(seed=0)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return len(actions) / (time.perf_counter() - start)


def main() -> None:
    """Measure and write throughput.json."""
    logging.disable(logging.WARNING)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (STEPS, 5)).astype(np.float32)
    bare = stepping_rate(gym.make(ENV_ID), actions)
    wrapped = CodedActions(gym.make(ENV_ID), TEMPLATES)
    no_selection = np.concatenate([actions, -np.ones((STEPS, 4), np.float32)], axis=1)
    continuous = stepping_rate(wrapped, no_selection)

    select_stack = np.array([0, 0, 0, 0, 0, -1, -1, -1, 1], np.float32)
    env_steps = successes = 0
    start = time.perf_counter()
    for seed in range(SELECTIONS):
        wrapped.reset(seed=seed)
        _, _, _, _, info = wrapped.step(select_stack)
        env_steps += info["env_steps"]
        successes += bool(info["success"])
    coded_seconds = time.perf_counter() - start

    env = gym.make(ENV_ID)
    env.reset(seed=0)
    scene = scene_message(env)
    start_seconds = []
    for _ in range(STARTS):
        start = time.perf_counter()
        skill = SandboxedSkill(TEMPLATES["stack"], ["red", "blue"])
        skill.act(scene)
        start_seconds.append(time.perf_counter() - start)
        skill.close()

    start_cost = float(np.median(start_seconds))
    per_step = (coded_seconds - SELECTIONS * start_cost) / env_steps
    record = {
        "env_id": ENV_ID,
        "bare_env_steps_per_s": bare,
        "wrapper_continuous_steps_per_s": continuous,
        "coded_stack": {
            "selections": SELECTIONS,
            "env_steps": env_steps,
            "successes": successes,
            "seconds": coded_seconds,
            "env_steps_per_s": env_steps / coded_seconds,
            "env_steps_per_selection": env_steps / SELECTIONS,
        },
        "selection_start_s": {
            "median": start_cost,
            "min": float(np.min(start_seconds)),
            "max": float(np.max(start_seconds)),
        },
        "coded_step_s_without_start": per_step,
        "bare_step_s": 1 / bare,
        "channel_and_scene_s_per_step": per_step - 1 / bare,
    }
    path = Path(__file__).with_name("throughput.json")
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
