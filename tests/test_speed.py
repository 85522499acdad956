"""Speed benchmarks (deselected by default): wrapper overhead, steps/s with state, pixels, async.

Run: MUJOCO_GL=egl python -m pytest -m benchmark -s tests/test_speed.py
or:  MUJOCO_GL=egl python tests/test_speed.py   (prints the figures as a Markdown table)
Figures depend on the machine and on what else runs on it; each is a median over rounds.
"""

from __future__ import annotations

import copy
import statistics
import time

import gymnasium as gym
import mujoco
import numpy as np
import pytest

import gameon.envs  # noqa: F401  (registers the GameOn/ ids)
from gameon.envs.world import N_SUBSTEPS

ENV_ID = "GameOn/Stack-v0"
ROUNDS = 5
STEPS = 2000
BLOCK = 200
"""Raw physics and env steps alternate in blocks of this many steps, so both see the same load."""
MAX_OVERHEAD = 1.25
MIN_STATE_RATE = 1300.0
MIN_PIXEL_RATE = 1000.0
MIN_ASYNC_SPEEDUP = 1.5

pytestmark = pytest.mark.benchmark


def _actions(n: int, num_envs: int | None = None, seed: int = 0) -> np.ndarray:
    shape = (n, 5) if num_envs is None else (n, num_envs, 5)
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(np.float32)


def step_overhead(rounds: int = ROUNDS, steps: int = STEPS) -> dict[str, float]:
    """Median time per env.step against raw mj_step(nstep=N_SUBSTEPS) on copies of its state.

    "raw" holds the env's last actuator targets (ctrl); "replay" replays the env's own ctrl
    sequence from the same state, so it simulates the same motion and contacts as the env did.
    """
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    world = env.unwrapped.world
    actions = _actions(steps)
    figures: dict[str, list[float]] = {"env": [], "raw": [], "replay": []}
    for _ in range(rounds):
        time_of = dict.fromkeys(figures, 0.0)
        count = dict.fromkeys(figures, 0)
        for start in range(0, steps, BLOCK):
            snapshot = copy.copy(world.data)
            held = copy.copy(world.data)
            t0 = time.perf_counter()
            for _ in range(BLOCK):
                mujoco.mj_step(world.model, held, nstep=N_SUBSTEPS)
            time_of["raw"] += time.perf_counter() - t0
            count["raw"] += BLOCK
            ctrls = []
            for action in actions[start : start + BLOCK]:
                t0 = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(action)
                time_of["env"] += time.perf_counter() - t0
                ctrls.append(world.data.ctrl.copy())
                if terminated or truncated:
                    env.reset()
                    break
            count["env"] += len(ctrls)
            t0 = time.perf_counter()
            for ctrl in ctrls:
                snapshot.ctrl[:] = ctrl
                mujoco.mj_step(world.model, snapshot, nstep=N_SUBSTEPS)
            time_of["replay"] += time.perf_counter() - t0
            count["replay"] += len(ctrls)
        for key in figures:
            figures[key].append(time_of[key] / count[key] * 1e6)
    env.close()
    env_us = figures["env"]
    return {
        "env_us": statistics.median(env_us),
        "raw_us": statistics.median(figures["raw"]),
        "replay_us": statistics.median(figures["replay"]),
        "ratio": statistics.median(e / r for e, r in zip(env_us, figures["raw"], strict=True)),
        "replay_ratio": statistics.median(
            e / r for e, r in zip(env_us, figures["replay"], strict=True)
        ),
    }


def single_rate(rounds: int = 3, steps: int = STEPS, **kwargs: object) -> float:
    """Median steps/s of one env under random actions, resets included."""
    env = gym.make(ENV_ID, **kwargs)
    env.reset(seed=0)
    actions = _actions(steps)
    rates = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        rates.append(steps / (time.perf_counter() - t0))
    env.close()
    return statistics.median(rates)


def async_rate(num_envs: int = 2, rounds: int = 3, steps: int = STEPS // 2) -> float:
    """Median env-steps/s (summed over envs) of gym.make_vec(..., vectorization_mode="async")."""
    envs = gym.make_vec(ENV_ID, num_envs=num_envs, vectorization_mode="async")
    envs.reset(seed=0)
    actions = _actions(steps, num_envs)
    for action in actions[:50]:  # warm up the workers
        envs.step(action)
    rates = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for action in actions:
            envs.step(action)
        rates.append(steps * num_envs / (time.perf_counter() - t0))
    envs.close()
    return statistics.median(rates)


def test_env_step_overhead_over_raw_physics() -> None:
    figures = step_overhead()
    print(
        f"\nenv.step {figures['env_us']:.0f} us, raw physics {figures['raw_us']:.0f} us "
        f"({N_SUBSTEPS} substeps, ctrl held), ratio {figures['ratio']:.3f} "
        f"(target <= {MAX_OVERHEAD}); replaying the env's ctrl {figures['replay_us']:.0f} us, "
        f"ratio {figures['replay_ratio']:.3f}"
    )
    assert figures["ratio"] <= MAX_OVERHEAD


def test_single_env_state_steps_per_second() -> None:
    rate = single_rate()
    print(f"\nsingle env, state obs: {rate:.0f} steps/s (target >= {MIN_STATE_RATE:.0f})")
    assert rate >= MIN_STATE_RATE


def test_single_env_pixels_steps_per_second() -> None:
    rate = single_rate(steps=STEPS // 2, obs_mode="pixels", pixel_size=84)
    print(f"\nsingle env, 84x84 pixels: {rate:.0f} steps/s (target >= {MIN_PIXEL_RATE:.0f})")
    assert rate >= MIN_PIXEL_RATE


def test_async_two_envs_speedup() -> None:
    single = single_rate()
    vec = async_rate()
    print(
        f"\nasync x2: {vec:.0f} env-steps/s, single {single:.0f} steps/s, "
        f"speed-up {vec / single:.2f} (target >= {MIN_ASYNC_SPEEDUP})"
    )
    assert vec >= MIN_ASYNC_SPEEDUP * single


if __name__ == "__main__":
    overhead = step_overhead()
    state = single_rate()
    pixels = single_rate(steps=STEPS // 2, obs_mode="pixels", pixel_size=84)
    vec = async_rate()
    print("| measure | figure | target |")
    print("| --- | --- | --- |")
    print(
        f"| env.step / raw physics ({N_SUBSTEPS} x mj_step, ctrl held) | {overhead['ratio']:.2f} "
        f"({overhead['env_us']:.0f} us / {overhead['raw_us']:.0f} us) | <= {MAX_OVERHEAD} |"
    )
    print(
        f"| env.step / raw physics replaying the env's ctrl | {overhead['replay_ratio']:.2f} "
        f"({overhead['env_us']:.0f} us / {overhead['replay_us']:.0f} us) | (diagnostic) |"
    )
    print(f"| one env, state obs | {state:.0f} steps/s | >= {MIN_STATE_RATE:.0f} |")
    print(f"| one env, 84x84 pixels | {pixels:.0f} steps/s | >= {MIN_PIXEL_RATE:.0f} |")
    print(
        f"| 2 envs, async | {vec:.0f} env-steps/s ({vec / state:.2f} x one env) "
        f"| >= {MIN_ASYNC_SPEEDUP} x one env |"
    )
