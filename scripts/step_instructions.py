"""env.step's machine instructions over those of the raw physics it runs, counted by callgrind.

Wall-time ratios drift on a shared virtual machine; instruction counts do not depend on what else
runs. For each env and reward mode this runs three processes under `valgrind --tool=callgrind`:
the set-up alone, the set-up plus STEPS env steps under random actions, and the set-up plus the raw
physics of those steps (the env's own actuator targets replayed from the same start, 25 x mj_step
each), and prints (env - set-up) / (physics - set-up). The set-up's count itself varies by a few
million instructions from process to process (memory layout, hash seeds), which moved the ratio by
up to +-0.02 at 300 steps; the default 1500 steps keep that under +-0.005.

    MUJOCO_GL=egl python scripts/step_instructions.py [STEPS]      # about 8 minutes
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np

import gameon.envs  # noqa: F401  (registers the GameOn/ ids)
from gameon.envs.world import N_SUBSTEPS

CASES = (
    ("GameOn/Stack-v0", "sparse"),
    ("GameOn/Stack-v0", "dense"),
    ("GameOn/Tower-v0", "sparse"),
    ("GameOn/Tower-v0", "dense"),
)
MODES = ("setup", "env", "physics")
DEFAULT_STEPS = 1500


def run(mode: str, env_id: str, reward_mode: str, steps: int, ctrls_path: Path) -> None:
    """One measured process: set up the env, then take `steps` env steps or their physics."""
    env = gym.make(env_id, reward_mode=reward_mode)
    env.reset(seed=0)
    world = env.unwrapped.world
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, 5)).astype(np.float32)
    if mode == "record":
        ctrls = []
        for action in actions:
            env.step(action)
            ctrls.append(world.data.ctrl.copy())
        np.save(ctrls_path, np.array(ctrls))
        return
    ctrls = np.load(ctrls_path)
    if mode == "env":
        for action in actions:
            env.step(action)
    elif mode == "physics":
        for ctrl in ctrls:
            world.data.ctrl[:] = ctrl
            mujoco.mj_step(world.model, world.data, nstep=N_SUBSTEPS)


def instructions(*args: str) -> int:
    """Instructions callgrind counts for this script run with `args`."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))


def main(steps: int) -> None:
    print(f"| env, reward | env.step / physics, instructions ({steps} steps) |")
    print("| --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for env_id, reward_mode in CASES:
            ctrls = Path(folder) / f"{env_id.split('/')[1]}_{reward_mode}.npy"
            args = (env_id, reward_mode, str(steps), str(ctrls))
            run("record", env_id, reward_mode, steps, ctrls)
            setup, env, physics = (instructions("--measure", mode, *args) for mode in MODES)
            ratio = (env - setup) / (physics - setup)
            print(f"| {env_id.removeprefix('GameOn/')} {reward_mode} | {ratio:.3f} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        mode, env_id, reward_mode, steps, ctrls = sys.argv[2:]
        run(mode, env_id, reward_mode, int(steps), Path(ctrls))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_STEPS)
