"""Language-goal block stacking environments, registered under the GameOn/ namespace.

`gym.make("GameOn/Stack-v0")` and friends; see `ENV_IDS` for the list and README for the options.
"""

import os
import sys

# EGL exists only on Linux: MuJoCo refuses MUJOCO_GL=egl elsewhere, failing `import mujoco`.
if sys.platform == "linux" and "DISPLAY" not in os.environ:
    os.environ.setdefault("MUJOCO_GL", "egl")

from gymnasium.envs.registration import register, registry  # noqa: E402

from gameon.envs.language import Instruction, parse  # noqa: E402
from gameon.envs.oracle import SceneState, success  # noqa: E402
from gameon.envs.stacking_env import StackingEnv  # noqa: E402
from gameon.envs.vector import make_vec as make_vec  # noqa: E402
from gameon.envs.wrappers import TargetRelative, target_relative  # noqa: E402

ENV_SKILLS: dict[str, tuple[tuple[str, ...], int]] = {
    "GameOn/Reach-v0": (("reach",), 100),
    "GameOn/Lift-v0": (("lift",), 150),
    "GameOn/Push-v0": (("push",), 200),
    "GameOn/Place-v0": (("place",), 250),
    "GameOn/Stack-v0": (("stack",), 250),
    "GameOn/Unstack-v0": (("unstack",), 250),
    "GameOn/Tower-v0": (("tower",), 400),
    "GameOn/MultiSkill-v0": (("reach", "lift", "push", "place", "stack", "unstack", "tower"), 400),
}
"""Each registered id: the skills it samples instructions from, and its max_episode_steps."""
ENV_IDS = tuple(ENV_SKILLS)

# gym.make wraps only in TimeLimit: the env refuses a step before reset itself, and the tests run
# gymnasium's full check_env on every id, so the order and passive-checker wrappers would only add
# a Python frame each to every step (about 1 us in all).
for env_id, (skills, max_steps) in ENV_SKILLS.items():
    if env_id not in registry:
        register(
            id=env_id,
            entry_point="gameon.envs.stacking_env:StackingEnv",
            max_episode_steps=max_steps,
            kwargs={"skills": skills},
            order_enforce=False,
            disable_env_checker=True,
        )

__all__ = [
    "ENV_IDS",
    "ENV_SKILLS",
    "Instruction",
    "SceneState",
    "StackingEnv",
    "TargetRelative",
    "make_vec",
    "parse",
    "success",
    "target_relative",
]
