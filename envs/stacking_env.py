"""The Gymnasium environment: a robot arm, coloured cubes and a language instruction per episode."""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from gameon.envs import language, oracle, rewards
from gameon.envs.controller import CartesianController, move_arm_to
from gameon.envs.language import COLOURS, GOAL_SIZE, SKILLS, Instruction
from gameon.envs.layout import sample_layout
from gameon.envs.world import N_SUBSTEPS, World, scene_from_state, state_size

REWARD_MODES = ("sparse", "dense")
OBS_MODES = ("state", "state+pixels", "pixels")
CAMERAS = ("front", "top", "wrist")
RESET_OPTIONS = ("instruction",)
STATE_BOUND = 1000.0
"""Every `state` entry stays within +-this; a simulation that leaves it is flagged unstable."""
ACTION_SIZE = 5
"""(vx, vy, vz, yaw rate, gripper) in [-1, 1]; gripper -1 is open, +1 closed."""
_EXACT_ACTION_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""Action arrays whose `tolist()` gives their float64 values as they are (no conversion needed)."""
_ACTION_FORMS = f"{ACTION_SIZE} real numbers (a float array or a list)"
SOFTWARE_RENDER_THREADS_VAR = "LP_NUM_THREADS"
"""Mesa llvmpipe's thread count, set to 0 only while this env creates its GL context."""


def _real_action(action: Any) -> np.ndarray:
    """An action given as a list, a scalar or an array of another dtype, as float64 values.

    Complex numbers (numpy would drop their imaginary part with only a warning), text and
    other objects are refused, naming the accepted forms; bools and integers are numbers.
    """
    try:
        array = np.asarray(action)
    except ValueError as error:  # a ragged nesting of sequences
        raise ValueError(f"action must be {_ACTION_FORMS}; got {action!r} ({error})") from None
    if array.dtype.kind not in "biuf":
        raise ValueError(f"action must be {_ACTION_FORMS}; got {action!r} (dtype {array.dtype})")
    return array.astype(np.float64)


def _choice(name: str, value: str, accepted: Sequence[str]) -> str:
    if value not in accepted:
        raise ValueError(f"unknown {name} {value!r}; accepted: {', '.join(map(str, accepted))}")
    return value


def _is_int(value: Any) -> bool:
    """An integer, numpy's included, but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


_SEED_FORMS = "None or a whole number >= 0 (a Python or NumPy integer, not a bool)"


def _seed(seed: Any) -> int | None:
    """The seed as the Python int gymnasium's reset takes: NumPy integers, as a seed array or
    np.random gives them, are accepted; anything else is refused naming the accepted forms."""
    if seed is None:
        return None
    if not _is_int(seed) or seed < 0:
        raise ValueError(f"seed must be {_SEED_FORMS}, got {seed!r}")
    return int(seed)


def _is_ordered(value: Any) -> bool:
    """A list or tuple (any non-text Sequence): a set would order the blocks or skills by string
    hashes, which differ from process to process, and a generator would leave env.spec unusable."""
    return isinstance(value, Sequence) and not isinstance(value, str)


_MAKE_KEYWORDS = ("max_episode_steps", "disable_env_checker")
"""gym.make's own keyword arguments, which it keeps from the env."""

_KEYWORD_HINTS = {
    "instruction": "an episode's instruction goes to reset(options={'instruction': text})",
    "max_episode_steps": "gym.make takes it; the env itself has no step limit",
    "disable_env_checker": "gym.make takes it, not the env",
    "seed": "a seed goes to reset(seed=...)",
}
"""What a keyword argument the env does not take is for, where a user may well pass it."""


def _unknown_keywords(unknown: Mapping[str, Any]) -> TypeError:
    """The error for keyword arguments the env does not take: each with the accepted name it is
    closest to (or where it belongs), then every accepted name (Python's own error names none)."""
    accepted = [name for name in inspect.signature(StackingEnv).parameters if name != "unknown"]
    parts = []
    for name in sorted(unknown):
        close = difflib.get_close_matches(name, [*accepted, *_MAKE_KEYWORDS], n=1)
        if name in _KEYWORD_HINTS:
            parts.append(f"{name!r} ({_KEYWORD_HINTS[name]})")
        elif close:
            parts.append(f"{name!r} (did you mean {close[0]!r}?)")
        else:
            parts.append(repr(name))
    plural = "s" if len(parts) > 1 else ""
    return TypeError(
        f"unknown keyword argument{plural} {', '.join(parts)}; accepted: {', '.join(accepted)} "
        f"(and gym.make's own {' and '.join(_MAKE_KEYWORDS)})"
    )


class NoDisplay(RuntimeError, ValueError):
    """Rendering would go through GLFW in a process without a display; says how to fix it (a
    ValueError too: a setting to change, which the commands report in one line)."""


def check_gl_backend() -> None:
    """Refuse, with the fix, to render through GLFW where there is no display: MuJoCo picks its
    GL backend when first imported, so one imported before `gameon.envs` set MUJOCO_GL=egl has
    picked GLFW, whose failure ("an OpenGL platform library has not been loaded") names neither
    the cause nor the fix."""
    if sys.platform != "linux" or "DISPLAY" in os.environ or "WAYLAND_DISPLAY" in os.environ:
        return
    backend = getattr(getattr(mujoco, "GLContext", None), "__module__", "")
    chosen = os.environ.get("MUJOCO_GL", "")
    if backend.endswith("glfw") and chosen.lower() not in ("", "egl"):
        raise NoDisplay(
            f"cannot render: MUJOCO_GL={chosen} makes MuJoCo render through GLFW, which needs a "
            "display, and none is set (DISPLAY); set MUJOCO_GL=egl for rendering without one"
        )
    if backend.endswith("glfw"):
        raise NoDisplay(
            "cannot render: MuJoCo chose GLFW, which needs a display, and none is set. It was "
            "imported before gameon.envs, which would have chosen EGL; set MUJOCO_GL=egl in the "
            "environment before Python starts (or import gameon.envs before mujoco and the "
            "libraries that import it, such as gymnasium's MuJoCo envs)"
        )


def _make_renderer(model: mujoco.MjModel, height: int, width: int) -> mujoco.Renderer:
    """A renderer whose GL context Mesa's llvmpipe, if it renders, drives from the calling thread.

    llvmpipe draws an 84x84 frame faster without helper threads on a small CPU. It reads
    LP_NUM_THREADS when its screen is created, with the first GL context of a display, so the
    variable is set only around this creation, only if the user has not set it, and removed
    after, leaving other libraries' GL contexts to Mesa's default. GPU drivers ignore it.
    """
    check_gl_backend()
    if SOFTWARE_RENDER_THREADS_VAR in os.environ:
        return mujoco.Renderer(model, height, width)
    os.environ[SOFTWARE_RENDER_THREADS_VAR] = "0"
    try:
        return mujoco.Renderer(model, height, width)
    finally:
        os.environ.pop(SOFTWARE_RENDER_THREADS_VAR, None)


def block_colours(blocks: int | Sequence[str]) -> tuple[str, ...]:
    """The scene's block colours as the env's `blocks` gives them: a count (the first n colours)
    or colours in a fixed order; ValueError naming the accepted forms otherwise."""
    if _is_int(blocks):
        if not 2 <= blocks <= len(COLOURS):
            raise ValueError(f"blocks must be 2 to {len(COLOURS)}, got {blocks}")
        return COLOURS[:blocks]
    if not _is_ordered(blocks):
        raise ValueError(
            f"blocks must be a number of blocks (2 to {len(COLOURS)}) or a list of colours "
            f"({', '.join(COLOURS)}) in a fixed order (a list or tuple, not a set: the state "
            f"lists the blocks in it), got {blocks!r}"
        )
    colours = tuple(blocks)
    for colour in colours:
        _choice("block colour", colour, COLOURS)
    if len(set(colours)) != len(colours) or not 2 <= len(colours) <= len(COLOURS):
        raise ValueError(f"blocks must be 2 to {len(COLOURS)} distinct colours, got {colours}")
    return colours


class StackingEnv(gym.Env):
    """Language-conditioned block manipulation with a 7-DoF arm under 20 Hz Cartesian control.

    Each episode has one instruction (given with `reset(options={"instruction": text})` or sampled
    from the env's skills over the scene's colours). `info["success"]` is the oracle's verdict.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        skills: Sequence[str] = SKILLS,
        blocks: int | Sequence[str] = 3,
        reward_mode: str = "sparse",
        obs_mode: str = "state",
        terminate_on_success: bool = True,
        render_mode: str | None = None,
        camera: str = "front",
        width: int = 320,
        height: int = 240,
        pixel_camera: str = "front",
        pixel_size: int = 84,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise _unknown_keywords(unknown)
        self.colours = block_colours(blocks)
        if not _is_ordered(skills):
            raise ValueError(
                f"skills must be a list of skill names ({', '.join(SKILLS)}) in a fixed order "
                f"(a list or tuple, not a set: seeded sampling follows it), got {skills!r}"
            )
        self.skills = tuple(_choice("skill", s, SKILLS) for s in skills)
        if not self.skills:
            raise ValueError(f"skills must name at least one skill; accepted: {', '.join(SKILLS)}")
        for skill in self.skills:
            if language.required_blocks(skill) > len(self.colours):
                raise ValueError(
                    f"skill {skill!r} needs {language.required_blocks(skill)} blocks; "
                    f"the scene has {len(self.colours)}"
                )
        self.reward_mode = _choice("reward_mode", reward_mode, REWARD_MODES)
        self.obs_mode = _choice("obs_mode", obs_mode, OBS_MODES)
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(
                f"unknown render_mode {render_mode!r}; accepted: rgb_array (and, through "
                "gym.make, human and rgb_array_list, which Gymnasium's wrappers make of it)"
            )
        self.render_mode = render_mode
        self.camera = _choice("camera", camera, CAMERAS)
        self.pixel_camera = _choice("pixel_camera", pixel_camera, CAMERAS)
        if not isinstance(terminate_on_success, bool | np.bool_):
            raise ValueError(
                f"terminate_on_success must be True or False, got {terminate_on_success!r}"
            )
        self.terminate_on_success = bool(terminate_on_success)
        for name, size in (("width", width), ("height", height), ("pixel_size", pixel_size)):
            if not _is_int(size) or not 16 <= size <= 1024:
                raise ValueError(
                    f"{name} must be a whole number of pixels from 16 to 1024, got {size!r}"
                )
        self.width, self.height, self.pixel_size = width, height, pixel_size

        self.world = World.build(self.colours, max(width, pixel_size), max(height, pixel_size))
        self.controller = CartesianController(self.world)
        observation = {}
        if obs_mode != "pixels":
            size = state_size(len(self.colours))
            observation["state"] = spaces.Box(-STATE_BOUND, STATE_BOUND, (size,), np.float64)
        observation["goal"] = spaces.Box(0.0, 1.0, (GOAL_SIZE,), np.float32)
        if obs_mode != "state":
            observation["pixels"] = spaces.Box(0, 255, (pixel_size, pixel_size, 3), np.uint8)
        self._magnitude = np.zeros(state_size(len(self.colours)))
        self.observation_space = spaces.Dict(observation)
        self.action_space = spaces.Box(-1.0, 1.0, (ACTION_SIZE,), np.float32)

        self.instruction: Instruction | None = None
        self._instruction_text = ""
        self._goal = np.zeros(GOAL_SIZE, np.float32)
        self._start = None
        self._last_obs: dict[str, np.ndarray] = {}
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}

    def reset(
        self, *, seed: int | np.integer | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=_seed(seed))
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise ValueError(
                f"reset options must be a dict, e.g. {{'instruction': text}}, got {options!r}"
            )
        for key in options:
            _choice("reset option", key, RESET_OPTIONS)
        self.instruction = self._instruction(options.get("instruction"))
        self._goal = language.encode(self.instruction)
        self._instruction_text = str(self.instruction)

        world = self.world
        layout = sample_layout(self.np_random, self.colours, self.instruction)
        mujoco.mj_resetData(world.model, world.data)
        blocks = zip(world.block_qpos, layout.block_pos, layout.block_yaw, strict=True)
        for qpos, pos, yaw in blocks:
            world.data.qpos[qpos[:3]] = pos
            world.data.qpos[qpos[3:]] = (np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
        world.data.qpos[world.finger_qpos] = (0.04, 0.04)
        move_arm_to(world, layout.hand_pos, layout.hand_yaw)
        mujoco.mj_forward(world.model, world.data)
        self.controller.reset()
        state = world.state_vector()
        self._start = scene_from_state(state.copy(), self.colours)
        observation = self._observation(state)
        self._keep(observation)
        return observation, self._info(self._start, unstable=False)

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles leave the renderers behind (GL contexts do not copy): the copy
        makes its own on its first render. World and controller rebuild their simulator views."""
        return {**self.__dict__, "_renderers": {}}

    def _instruction(self, given: str | Instruction | None) -> Instruction:
        if given is None:
            skill = self.skills[int(self.np_random.integers(len(self.skills)))]
            return language.sample(skill, self.colours, self.np_random)
        instruction = language.parse(given) if isinstance(given, str) else given
        if not isinstance(instruction, Instruction):
            raise ValueError(
                f"instruction must be text or an Instruction, got {type(given).__name__}"
            )
        if instruction.skill not in self.skills:
            raise ValueError(
                f"this env practises {', '.join(self.skills)}, not {instruction.skill!r}; "
                "GameOn/MultiSkill-v0 accepts every skill"
            )
        for colour in instruction.objects:
            if colour not in self.colours:
                raise ValueError(
                    f"instruction names a {colour} block; this scene has {', '.join(self.colours)}"
                )
        return instruction

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.instruction is None:
            raise RuntimeError("call reset() before step()")
        if type(action) is not np.ndarray or action.dtype not in _EXACT_ACTION_DTYPES:
            action = _real_action(action)
        if action.shape != (ACTION_SIZE,):
            raise ValueError(
                f"action must have shape ({ACTION_SIZE},) = (vx, vy, vz, yaw rate, gripper), "
                f"got {action.shape}"
            )
        values = action.tolist()
        if not all(map(math.isfinite, values)):
            raise ValueError(f"action must be finite, got {action}")
        world = self.world
        # Clipped to [-1, 1] by comparisons: the values min and max would give, at a third the cost.
        self.controller.apply(
            [-1.0 if value < -1.0 else 1.0 if value > 1.0 else value for value in values]
        )
        mujoco.mj_step(world.model, world.data, nstep=N_SUBSTEPS)
        state = world.state_vector()
        magnitude = np.abs(state, self._magnitude)
        if world.unstable() or not magnitude.item(magnitude.argmax()) <= STATE_BOUND:  # NaN too
            observation = {key: value.copy() for key, value in self._last_obs.items()}
            return observation, 0.0, False, True, self._info(None, unstable=True)

        scene = world.live_scene()
        success = oracle.success(self.instruction, scene, self._start)
        if self.reward_mode == "sparse" or success:
            reward = float(success)
        else:
            reward = rewards.shaping(self.instruction, scene, self._start)
        observation = self._observation(state)
        self._keep(observation)
        info = self._info(scene, unstable=False, success=success)
        return observation, reward, success and self.terminate_on_success, False, info

    def _keep(self, observation: dict[str, np.ndarray]) -> None:
        """Keep the env's own copy of the last good observation, for an unstable step and for
        set_instruction to return: the caller owns the arrays it was given and may change them."""
        self._last_obs = {key: value.copy() for key, value in observation.items()}

    def _observation(self, state: np.ndarray) -> dict[str, np.ndarray]:
        observation = {}
        if self.obs_mode != "pixels":
            observation["state"] = state
        observation["goal"] = self._goal.copy()
        if self.obs_mode != "state":
            size = self.pixel_size
            observation["pixels"] = self._render(self.pixel_camera, size, size)
        return observation

    def _info(
        self, scene: oracle.SceneState | None, unstable: bool, success: bool | None = None
    ) -> dict[str, Any]:
        if success is None:
            success = scene is not None and oracle.success(self.instruction, scene, self._start)
        return {
            "success": success,
            "is_success": success,
            "instruction": self._instruction_text,
            "sim_unstable": unstable,
        }

    def set_instruction(self, instruction: str | Instruction) -> dict[str, np.ndarray]:
        """Switch the active instruction mid-episode (a skill sequence); return the observation.

        From here on success and rewards judge the new instruction, push against the scene at
        this call; the returned observation carries the new goal.
        """
        if self.instruction is None:
            raise RuntimeError("call reset() before set_instruction()")
        if instruction is None:  # _instruction would sample one, which reset alone may do
            raise ValueError("set_instruction needs an instruction: text or an Instruction")
        self.instruction = self._instruction(instruction)
        self._goal = language.encode(self.instruction)
        self._instruction_text = str(self.instruction)
        self._start = scene_from_state(self.world.state_vector(), self.colours)
        self._last_obs = {**self._last_obs, "goal": self._goal.copy()}
        return {key: value.copy() for key, value in self._last_obs.items()}

    def scene(self) -> oracle.SceneState:
        """The current scene as the oracle sees it."""
        return self.world.scene_state()

    @property
    def start_scene(self) -> oracle.SceneState | None:
        """The scene at the last reset (push success is judged against it)."""
        return self._start

    def render(self) -> np.ndarray | None:
        if self.instruction is None:
            raise RuntimeError("call reset() before render()")
        if self.render_mode != "rgb_array":
            return None
        return self._render(self.camera, self.width, self.height)

    def _render(self, camera: str, width: int, height: int) -> np.ndarray:
        renderer = self._renderers.get((width, height))
        if renderer is None:
            renderer = _make_renderer(self.world.model, height, width)
            self._renderers[(width, height)] = renderer
        renderer.update_scene(self.world.data, camera)
        return renderer.render()

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
