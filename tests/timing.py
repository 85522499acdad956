"""Timing for the speed benchmarks: what a call costs next to the physics of one env step.

Absolute times drift with the machine's load (README, "Speed"), so the benchmarks compare with a
reference measured in the same run, in alternating rounds, so both see the same load.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import mujoco

import gameon.envs  # noqa: F401  (registers the GameOn/ ids)
from gameon.envs.world import N_SUBSTEPS

REFERENCE_ENV_ID = "GameOn/Stack-v0"
MAX_SHARE_OF_PHYSICS_STEP = 0.25
"""What the oracle or the dense reward, which run on every env step, may cost per call as a
share of that step's raw physics (about 0.05 to 0.09 on the 2-core development VM)."""


def _seconds_per_call(fn: Callable[[], object], calls: int) -> float:
    begin = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - begin) / calls


def share_of_physics_step(
    fn: Callable[[], object], calls: int = 1000, steps: int = 50, rounds: int = 5
) -> float:
    """Median over rounds of fn's time per call over one control step's raw physics.

    The reference is `mj_step(nstep=N_SUBSTEPS)` on REFERENCE_ENV_ID's model and state after a
    seeded reset; each round times `steps` of it, then `calls` of fn.
    """
    env = gym.make(REFERENCE_ENV_ID)
    try:
        env.reset(seed=0)
        world = env.unwrapped.world
        shares = []
        for _ in range(rounds):
            physics = _seconds_per_call(
                lambda: mujoco.mj_step(world.model, world.data, nstep=N_SUBSTEPS), steps
            )
            shares.append(_seconds_per_call(fn, calls) / physics)
    finally:
        env.close()
    return statistics.median(shares)
