"""Observation wrappers for learners from other libraries (Stable-Baselines3 and the like).

`TargetRelative` adds what the GameOn baselines compute for themselves: each block the instruction
names, relative to the hand. Without it a network has to pick the named block out of `state` by
the goal's one-hots, a product it learns slowly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gameon.envs.language import COLOURS, MAX_TOWER, SKILLS
from gameon.envs.stacking_env import STATE_BOUND
from gameon.envs.world import PROPRIO_SIZE, state_size

TARGET_RELATIVE_KEY = "target_relative"
TARGET_RELATIVE_SIZE = MAX_TOWER * 3
_GOAL_SLOTS = slice(len(SKILLS), len(SKILLS) + MAX_TOWER * len(COLOURS))
_TCP = slice(14, 17)
"""Where `state` holds the TCP position (after arm joint positions and velocities)."""


def target_relative(state: np.ndarray, goal: np.ndarray, colours: Sequence[str]) -> np.ndarray:
    """(..., MAX_TOWER * 3) float64: per argument slot of the instruction, the named block's
    position minus the TCP's; zeros for unused slots. Single or batched (leading axes shared).

    `colours` are the scene's blocks in state order (`StackingEnv.colours`).
    """
    n = len(colours)
    if state.shape[-1] != state_size(n):
        raise ValueError(
            f"a state of length {state.shape[-1]} does not fit a scene of {n} blocks "
            f"({', '.join(colours)}); expected length {state_size(n)}"
        )
    batch = state.shape[:-1]
    columns = [COLOURS.index(colour) for colour in colours]
    blocks = state[..., PROPRIO_SIZE:].reshape(*batch, n, 17 + n)[..., :3]
    slots = goal[..., _GOAL_SLOTS].reshape(*batch, MAX_TOWER, len(COLOURS))[..., columns]
    tcp = state[..., _TCP]
    relative = slots @ blocks - slots.sum(-1, keepdims=True) * tcp[..., None, :]
    return relative.reshape(*batch, TARGET_RELATIVE_SIZE)


class TargetRelative(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Adds `target_relative` (see `target_relative`) to a GameOn env's Dict observation.

    `TargetRelative(gym.make("GameOn/Reach-v0"))` gives Stable-Baselines3's `MultiInputPolicy`
    the named block's offset from the hand, as the GameOn learners' flat observation has it.
    Needs the `state` key (obs_mode "state" or "state+pixels").
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not isinstance(space, spaces.Dict) or "state" not in space.spaces:
            raise ValueError(
                "TargetRelative reads the `state` key of a GameOn env's Dict observation: make "
                "the env with obs_mode='state' or 'state+pixels', and wrap it in TargetRelative "
                f"before any wrapper that flattens the observation; got observation space {space}"
            )
        self.colours: tuple[str, ...] = tuple(env.get_wrapper_attr("colours"))
        bound = 2 * STATE_BOUND
        added = spaces.Box(-bound, bound, (TARGET_RELATIVE_SIZE,), np.float64)
        self.observation_space = spaces.Dict({**space.spaces, TARGET_RELATIVE_KEY: added})

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        relative = target_relative(observation["state"], observation["goal"], self.colours)
        return {**observation, TARGET_RELATIVE_KEY: relative}

    def set_instruction(self, instruction: Any) -> dict[str, Any]:
        """The env's `set_instruction`, its observation with this wrapper's key added."""
        return self.observation(self.env.get_wrapper_attr("set_instruction")(instruction))
