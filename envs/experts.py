"""Scripted experts: one closed-loop policy per skill, acting only through the env's action space.

Each expert reads the block poses from the `state` observation (privileged, as scripted experts
are) and runs a small script of moves written as Python generators: pick a block, carry it, put
it down, push it. Every move re-aims at the blocks' current poses each step, and a failed grasp
is retried, so the experts recover from their own noise. `noise` adds Gaussian action noise to
make imperfect data.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator

import numpy as np

from gameon.envs.controller import MAX_SPEED, MAX_YAW_RATE
from gameon.envs.language import Instruction
from gameon.envs.layout import MIN_SPACING, PLACE_OFFSET
from gameon.envs.oracle import BLOCK_SIZE, DIRECTION_VECTORS, SIDE_VECTORS, SceneState, grasped
from gameon.envs.world import BLOCK_AREA_HIGH, BLOCK_AREA_LOW, CONTROL_DT, scene_from_state

OPEN, CLOSED = -1.0, 1.0
HOVER = 0.10
"""Height of the TCP above a block's centre before descending onto it, m."""
CLEARANCE = 0.012
"""Gap left under a carried block when it is lowered onto its target, m."""
GRASP_ABOVE_CENTRE = 0.008
"""The TCP closes this far above a block's centre, m."""
PUSH_TRAVEL = 0.105
"""How far the push expert moves a block, m (the oracle asks for PUSH_DISTANCE)."""
Script = Iterator[np.ndarray]


def block_yaw(scene: SceneState, index: int) -> float:
    """Yaw of a cube modulo its 90-degree symmetry, in [-pi/4, pi/4)."""
    w, x, y, z = scene.block_quat[index]
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return float((yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4)


class Expert:
    """A scripted policy for the instruction of the env's current episode."""

    def __init__(self, env, noise: float = 0.0, seed: int | None = None) -> None:
        if (
            isinstance(noise, bool)
            or not isinstance(noise, numbers.Real)
            or not 0 <= noise < math.inf  # NaN too
        ):
            raise ValueError(f"expert noise must be a number >= 0 (an action std), got {noise!r}")
        self.env = env
        self.noise = float(noise)
        self.rng = np.random.default_rng(seed)
        self.scene: SceneState | None = None
        self.hand_yaw = 0.0
        self._grip = OPEN
        self._script: Script | None = None
        """None until the first reset(): act() then refuses, rather than hold still"""
        self._episode: SceneState | None = None
        """The env's start scene when the script was planned: the env makes a new one at every
        reset and set_instruction, which the script was not planned for."""

    def reset(self) -> None:
        """Start the script for the env's current instruction (call after env.reset)."""
        self._grip = OPEN
        self._script = self._plan(self.env.instruction)
        self._episode = self.env.start_scene

    def act(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        """The next action, given the latest observation."""
        if self._script is None:
            raise RuntimeError(
                "call expert.reset() after env.reset() and before act(): it plans the episode's "
                "instruction"
            )
        if self.env.start_scene is not self._episode:
            raise RuntimeError(
                "the env was reset, or given a new instruction, since expert.reset(): call "
                "expert.reset() after each env.reset(), so that it plans the new episode's "
                "instruction rather than go on with the last one's script"
            )
        if "state" in observation:
            state = observation["state"]
            self.scene = scene_from_state(state, self.env.colours)
            self.hand_yaw = float(np.arctan2(state[17], state[18]))
        else:
            self.scene = self.env.scene()
            self.hand_yaw = self.env.controller.hand_yaw()
        action = next(self._script, None)
        if action is None:
            action = self._command(np.zeros(3), self._grip)
        if self.noise > 0:
            action = action + self.rng.normal(0.0, self.noise, size=action.shape)
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    # -- scripts per skill --------------------------------------------------------------------

    def _plan(self, instruction: Instruction) -> Script:
        index = [self.env.colours.index(c) for c in instruction.objects]
        skill = instruction.skill
        if skill == "reach":
            yield from self._move(lambda: self._pos(index[0]) + (0, 0, 0.06), OPEN, tol=0.005)
        elif skill == "lift":
            yield from self._pick(index[0])
            yield from self._move(lambda: self._lift_target(index[0], 0.15), CLOSED)
        elif skill == "push":
            yield from self._push(index[0], np.array(DIRECTION_VECTORS[instruction.relation]))
        elif skill == "place":
            spot = self._pos(index[1])[:2] + PLACE_OFFSET * np.array(
                SIDE_VECTORS[instruction.relation]
            )
            yield from self._pick(index[0])
            yield from self._put(index[0], lambda: np.array([*spot, BLOCK_SIZE / 2]))
        elif skill == "stack":
            yield from self._stack(index[0], index[1])
        elif skill == "unstack":
            yield from self._pick(index[0])
            spot = self._free_spot(index[0])
            yield from self._put(index[0], lambda: np.array([*spot, BLOCK_SIZE / 2]))
        elif skill == "tower":
            for below, above in zip(index, index[1:], strict=False):
                yield from self._stack(above, below)

    def _stack(self, top: int, bottom: int) -> Script:
        yield from self._pick(top)
        yield from self._put(top, lambda: self._pos(bottom) + (0, 0, BLOCK_SIZE))

    # -- moves ----------------------------------------------------------------------------------

    def _pick(self, block: int) -> Script:
        """Grasp a block, retrying from above until both fingers hold it."""
        for _ in range(4):
            yaw = lambda: block_yaw(self.scene, block)  # noqa: E731
            yield from self._move(lambda: self._pos(block) + (0, 0, HOVER), OPEN, yaw, tol=0.01)
            grasp_point = lambda: self._grasp_point(block)  # noqa: E731
            yield from self._move(grasp_point, OPEN, yaw, tol=0.005, speed=0.35)
            yield from self._hold(CLOSED, steps=5)
            if grasped(self.scene, self.scene.colours[block]):
                return
            yield from self._move(lambda: self.scene.tcp_pos + (0, 0, 0.05), OPEN, tol=0.01)

    def _put(self, block: int, goal: Callable[[], np.ndarray]) -> Script:
        """Carry a held block so its centre ends at goal(), then release it and back off."""
        carry_height = BLOCK_SIZE * len(self.scene.colours) + 0.06

        def aim(height: float) -> np.ndarray:
            offset = self.scene.tcp_pos - self._pos(block)
            return np.array([*(goal()[:2] + offset[:2]), goal()[2] + offset[2] + height])

        yield from self._move(lambda: self._lift_target(block, carry_height), CLOSED, tol=0.02)
        yield from self._move(lambda: aim(max(carry_height - goal()[2], 0.04)), CLOSED, tol=0.01)
        yield from self._move(lambda: aim(0.03), CLOSED, tol=0.006)
        yield from self._move(lambda: aim(CLEARANCE), CLOSED, tol=0.004, max_steps=40, speed=0.35)
        yield from self._hold(OPEN, steps=5)
        yield from self._move(lambda: self._pos(block) + (0, 0, HOVER), OPEN, tol=0.015)

    def _push(self, block: int, direction: np.ndarray) -> Script:
        """Push a block PUSH_TRAVEL along a direction with the broad side of the closed fingers."""
        start = self._pos(block)[:2].copy()
        yaw = 0.0 if direction[0] == 0 else np.pi / 2
        behind = lambda: self._pos(block)[:2] - 0.065 * direction  # noqa: E731
        yield from self._move(lambda: np.array([*behind(), 0.12]), CLOSED, lambda: yaw, tol=0.01)
        yield from self._move(lambda: np.array([*behind(), 0.02]), CLOSED, lambda: yaw, tol=0.008)

        through = lambda: np.array([*(self._pos(block)[:2] + 0.02 * direction), 0.02])  # noqa: E731
        for _ in range(80):
            if (self._pos(block)[:2] - start) @ direction >= PUSH_TRAVEL:
                break
            yield from self._move(through, CLOSED, lambda: yaw, tol=0.0, max_steps=1, speed=0.4)
        yield from self._move(lambda: self.scene.tcp_pos - (*(0.03 * direction), 0.0), CLOSED)
        yield from self._move(lambda: self.scene.tcp_pos + (0, 0, 0.1), CLOSED, tol=0.02)

    def _move(
        self,
        target: Callable[[], np.ndarray],
        grip: float,
        yaw: Callable[[], float] | None = None,
        tol: float = 0.01,
        max_steps: int = 60,
        speed: float = 1.0,
    ) -> Script:
        """Servo the TCP toward target() (re-evaluated each step) until within tol."""
        self._grip = grip
        for _ in range(max_steps):
            error = target() - self.scene.tcp_pos
            if np.linalg.norm(error) < tol:
                return
            yield self._command(error, grip, None if yaw is None else yaw(), speed)

    def _hold(self, grip: float, steps: int) -> Script:
        self._grip = grip
        for _ in range(steps):
            yield self._command(np.zeros(3), grip)

    def _command(
        self, error: np.ndarray, grip: float, yaw: float | None = None, speed: float = 1.0
    ) -> np.ndarray:
        action = np.zeros(5)
        action[:3] = np.clip(error / (MAX_SPEED * CONTROL_DT), -speed, speed)
        if yaw is not None:
            action[3] = np.clip((yaw - self.hand_yaw) / (MAX_YAW_RATE * CONTROL_DT), -1.0, 1.0)
        action[4] = grip
        return action

    # -- geometry -------------------------------------------------------------------------------

    def _pos(self, block: int) -> np.ndarray:
        return self.scene.block_pos[block]

    def _grasp_point(self, block: int) -> np.ndarray:
        """Where the TCP closes on a block: a little above its centre, so a block under it is
        never caught by the pads."""
        return self._pos(block) + (0, 0, GRASP_ABOVE_CENTRE)

    def _lift_target(self, block: int, height: float) -> np.ndarray:
        offset = self.scene.tcp_pos - self._pos(block)
        return np.array([*self.scene.tcp_pos[:2], BLOCK_SIZE / 2 + height + offset[2]])

    def _free_spot(self, block: int) -> np.ndarray:
        """The point of a grid over the block area farthest from every other block."""
        others = np.delete(self.scene.block_pos[:, :2], block, axis=0)
        xs = np.linspace(BLOCK_AREA_LOW[0], BLOCK_AREA_HIGH[0], 7)
        ys = np.linspace(BLOCK_AREA_LOW[1], BLOCK_AREA_HIGH[1], 7)
        grid = np.stack(np.meshgrid(xs, ys), axis=-1).reshape(-1, 2)
        gaps = np.linalg.norm(grid[:, None] - others[None], axis=-1).min(axis=1)
        near = np.linalg.norm(grid - self._pos(block)[:2], axis=1)
        ok = gaps >= MIN_SPACING + 0.02
        return grid[np.argmin(np.where(ok, near, np.inf))]


def make_expert(env, noise: float = 0.0, seed: int | None = None) -> Expert:
    """The scripted expert for a StackingEnv (pass `env.unwrapped` for a wrapped env)."""
    return Expert(getattr(env, "unwrapped", env), noise, seed)


def expert_success(env_id: str, episodes: int, noise: float = 0.0, seed: int = 0) -> float:
    """Fraction of seeded episodes (seeds seed .. seed+episodes-1) the expert completes."""
    import gymnasium as gym

    env = gym.make(env_id)
    successes = 0
    for episode in range(seed, seed + episodes):
        observation, info = env.reset(seed=episode)
        expert = make_expert(env, noise, seed=episode)
        expert.reset()
        done = False
        while not done:
            observation, _, terminated, truncated, info = env.step(expert.act(observation))
            done = terminated or truncated
        successes += bool(info["success"])
    env.close()
    return successes / episodes
