"""Timing for the speed benchmarks: what a call costs next to the physics of one env step.

Absolute times drift with the machine's load (README, "Speed"), so the benchmarks compare with a
reference measured in the same run, in alternating rounds, so both see the same load.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import gymnasium as gym
import mujoco
import numpy as np

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


def machine() -> str:
    """The machine and interpreter the figures were measured on, in one line: the speed tables
    move with both (a CPU's model, and how its Python was built)."""
    model = platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as file:
        names = [line.split(":", 1)[1].strip() for line in file if line.startswith("model name")]
        model = names[0] if names else model
    return (
        f"{model}, {os.cpu_count()} CPUs; Python {platform.python_version()} at "
        f"{sys.base_prefix} ({platform.python_compiler()}), numpy {np.__version__}, "
        f"mujoco {mujoco.__version__}"
    )
