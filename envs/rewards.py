"""Dense, staged shaping rewards per skill in [0, 1]; 1.0 exactly when the oracle says success.

Each skill is a fixed sequence of stages (`STAGES`). A scene that is not a success scores

    (stage + PROGRESS_CAP * progress) / number of stages

where `stage` is the furthest stage the scene is in, judged from the scene alone (ManiSkill-style,
so the reward is Markov), and `progress` in [0, 1] is a smooth `1 - tanh(gain * distance)` term
toward the next stage. The cap keeps every stage's best score below the next stage's worst, so
moving on always pays, and keeps every non-success below 1.

A tower of n blocks is scored level by level: (levels done + share) / n, where the levels done
are the base on the table and then each block on the one below it, counted from the bottom while
they hold, and the share in [0, 1) is the stack reward of the next block onto the built part
(the base's drop onto the table while no level holds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gameon.envs.language import Instruction
from gameon.envs.oracle import (
    DIRECTION_VECTORS,
    LIFT_HEIGHT,
    PUSH_DISTANCE,
    REST_ANG_VEL,
    REST_LIN_VEL,
    SIDE_VECTORS,
    STACK_XY_TOL,
    TABLE_HEIGHT,
    SceneState,
    clear_radius,
    evaluate,
    grasped,
    levels_done,
    lifted,
    next_to,
    on,
    success,
    tcp_distance,
)

_PICK = ("reach", "grasp", "lift")
STAGES: dict[str, tuple[str, ...]] = {
    "reach": ("hover",),
    "lift": _PICK,
    "push": ("approach", "push", "clear"),
    "place": (*_PICK, "carry", "lower", "release"),
    "stack": (*_PICK, "align", "lower", "release"),
    "unstack": (*_PICK, "aside", "lower", "release"),
    "tower": ("base", *(f"level {stage}" for stage in (*_PICK, "align", "lower", "release"))),
}
"""Each skill's stages in order; a tower repeats the stack stages ("level ...") once per level."""

PROGRESS_CAP = 0.9
"""Share of a stage its shaping term can fill, so the next stage always scores higher."""
COARSE_GAIN = 5.0
"""tanh gain for moves across the workspace (approach, carry), 1/m."""
FINE_GAIN = 10.0
"""tanh gain for centimetre-scale moves (lift, lower, push), 1/m."""
HOVER_HEIGHT = 0.05
"""Reach target: TCP this far above the block's top face, mid REACH_Z_RANGE, m."""
GRASP_REACH = 0.02
"""Horizontal TCP distance from the block centre within which the grasp stage starts, m (with the
TCP between the block's bottom and top faces, where closing the fingers pinches it)."""
HOLD_REACH = 0.025
"""A pinched block this close to the TCP is held in the hand (scripted grasps: <= 1.1 cm); one
pinched further off is pressed by the fingertips from above and earns no lift or carry reward, m."""
APPROACH_OPEN_SHARE = 0.25
"""Share of the approach progress paid only to an open gripper (fully open: all of it; no wider
than the block: none), so a learner opens the hand before it can close around the block."""
GRIPPER_WIDTH = 0.08
"""Opening of the fully open gripper (2 * world.FINGER_OPEN), m."""
OVERSHOOT = 0.01
"""Lift and push shaping aim this far past the threshold that completes the stage, m."""
CLEAR_MARGIN = 0.02
"""A carried block's bottom must clear the other block's top by this much, m."""
PRE_PUSH_OFFSET = 0.05
"""Pre-push point: this far behind the block centre, against the push direction, m."""
PUSH_CONTACT_TOL = 0.03
"""TCP distance from the pre-push point within which the push stage counts, m."""
LATERAL_PENALTY = 0.2
"""Most push progress lost to drift across the push direction."""
PLACE_SHAPING_OFFSET = 0.07
"""The place stages aim at the other block's centre plus this times the side vector, m.

The same notion as layout.PLACE_OFFSET (0.075, mid NEXT_TO_RANGE), where the layout keeps a spot
free and the place expert puts the block, but 5 mm nearer the other block: both spots count as
next to it. It stays apart so that dense rewards match earlier runs; aiming the reward at
layout.PLACE_OFFSET would change Place-v0's dense rewards."""
PLACE_XY_TOL = 0.02
"""Horizontal distance from the place spot at which lowering starts, m."""
UNSTACK_ASIDE = 0.08
"""Horizontal distance from the bottom block at which an unstacked block may go down, m."""


def _centre(scene: SceneState, x: str) -> list[float]:
    """Block x's centre as floats: the shaping below is scalar arithmetic, cheaper than numpy's."""
    return scene.block_pos[scene.index(x)].tolist()


def _gap(a: Sequence[float], b: Sequence[float]) -> float:
    return math.hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2])


def _across(a: Sequence[float], b: Sequence[float]) -> float:
    return math.hypot(a[0] - b[0], a[1] - b[1])


def _near(distance: float, gain: float) -> float:
    return 1.0 - math.tanh(gain * max(distance, 0.0))


def _staged(stage: int, progress: float, stages: int) -> float:
    return (stage + PROGRESS_CAP * min(max(progress, 0.0), 1.0)) / stages


def _held(scene: SceneState, x: str, i: int) -> bool:
    return grasped(scene, x) or bool(scene.touches_robot[i])


def _in_hand(scene: SceneState, x: str) -> bool:
    """Pinched by both fingers with its centre near the TCP (a grasp, not a fingertip press)."""
    return grasped(scene, x) and tcp_distance(scene, scene.index(x)) <= HOLD_REACH


def _clear_height(scene: SceneState, j: int) -> float:
    top = scene.block_pos.item(j, 2) + scene.block_size / 2 - TABLE_HEIGHT
    return max(LIFT_HEIGHT, top + CLEAR_MARGIN)


def _pick(scene: SceneState, x: str, height: float) -> tuple[int, float]:
    """Stage (reach, grasp, lift) and progress of picking x up until its bottom is at `height`."""
    centre = _centre(scene, x)
    if _in_hand(scene, x):
        bottom = centre[2] - scene.block_size / 2 - TABLE_HEIGHT
        return 2, _near(height + OVERSHOOT - bottom, FINE_GAIN)
    closed = (GRIPPER_WIDTH - scene.gripper_opening) / (GRIPPER_WIDTH - scene.block_size)
    closed = min(max(closed, 0.0), 1.0)
    tcp = scene.tcp_pos.tolist()
    across = _across(tcp, centre)
    if across <= GRASP_REACH and abs(tcp[2] - centre[2]) <= scene.block_size / 2:
        return 1, 0.5 * _near(across, FINE_GAIN) + 0.5 * closed
    gap = _gap(tcp, centre)
    return 0, _near(gap, COARSE_GAIN) * (1.0 - APPROACH_OPEN_SHARE * closed)


def _settle(scene: SceneState, x: str) -> float:
    """Progress of letting go of x: TCP out of its padded bounding sphere, robot off it, x still."""
    i = scene.index(x)
    clear = min(tcp_distance(scene, i) / clear_radius(scene), 1.0)
    if scene.touches_robot[i]:
        clear *= 0.5
    lin = math.hypot(*scene.block_linvel[i].tolist())
    ang = math.hypot(*scene.block_angvel[i].tolist())
    still = _near(lin / REST_LIN_VEL + ang / REST_ANG_VEL, 0.5)
    return 0.5 * (clear + still)


def _reach(scene: SceneState, x: str) -> float:
    """Hover: TCP toward the point HOVER_HEIGHT above x's top face."""
    centre = _centre(scene, x)
    target = (centre[0], centre[1], centre[2] + scene.block_size / 2 + HOVER_HEIGHT)
    gap = _gap(scene.tcp_pos.tolist(), target)
    return _staged(0, _near(gap, COARSE_GAIN), len(STAGES["reach"]))


def _push(
    scene: SceneState, start: SceneState, x: str, direction: str, flags: dict[str, bool]
) -> float:
    """Approach the pre-push point, push x along `direction`, then clear the gripper."""
    stages = len(STAGES["push"])
    if flags["displaced"] and flags["on_line"] and flags["on_table"]:
        return _staged(2, _settle(scene, x), stages)
    ux, uy = DIRECTION_VECTORS[direction]
    centre = _centre(scene, x)
    behind = (centre[0] - ux * PRE_PUSH_OFFSET, centre[1] - uy * PRE_PUSH_OFFSET, centre[2])
    gap = _gap(scene.tcp_pos.tolist(), behind)
    if gap > PUSH_CONTACT_TOL:
        return _staged(0, _near(gap, COARSE_GAIN), stages)
    origin = _centre(start, x)
    dx, dy = centre[0] - origin[0], centre[1] - origin[1]
    along, drift = ux * dx + uy * dy, abs(ux * dy - uy * dx)
    pushed = _near(PUSH_DISTANCE + OVERSHOOT - along, FINE_GAIN)
    return _staged(1, pushed - LATERAL_PENALTY * math.tanh(FINE_GAIN * drift), stages)


def _place(scene: SceneState, x: str, y: str, side: str) -> float:
    """Pick x, carry it over the spot beside y, lower it onto the table there, let go."""
    stages = len(STAGES["place"])
    if next_to(scene, x, y, side):
        return _staged(5, _settle(scene, x), stages)
    i, j = scene.index(x), scene.index(y)
    ax, ay = SIDE_VECTORS[side]
    anchor = scene.block_pos[j].tolist()
    spot = (
        anchor[0] + ax * PLACE_SHAPING_OFFSET,
        anchor[1] + ay * PLACE_SHAPING_OFFSET,
        TABLE_HEIGHT + scene.block_size / 2,
    )
    centre = scene.block_pos[i].tolist()
    across = _across(centre, spot)
    if across <= PLACE_XY_TOL and _held(scene, x, i):
        return _staged(4, _near(_gap(centre, spot), FINE_GAIN), stages)
    height = _clear_height(scene, j)
    if lifted(scene, x, height) and _in_hand(scene, x):
        return _staged(3, _near(across, COARSE_GAIN), stages)
    return _staged(*_pick(scene, x, height), stages)


def _stack(scene: SceneState, x: str, y: str) -> float:
    """Stack shaping of x onto y in [0, 1), below 1 even when stacked: callers check success."""
    if on(scene, x, y):
        return _staged(5, _settle(scene, x), len(STAGES["stack"]))
    return _stack_unseated(scene, x, y)


def _stack_unseated(scene: SceneState, x: str, y: str) -> float:
    """Stack shaping of x onto y while x is not on y: the pick, align and lower stages."""
    stages = len(STAGES["stack"])
    i, j = scene.index(x), scene.index(y)
    top, below = scene.block_pos[i].tolist(), scene.block_pos[j].tolist()
    across = _across(top, below)
    rise = top[2] - below[2]
    if across <= STACK_XY_TOL and rise >= 0.5 * scene.block_size and _held(scene, x, i):
        seat = math.hypot(across, rise - scene.block_size)
        return _staged(4, _near(seat, FINE_GAIN), stages)
    height = _clear_height(scene, j)
    if lifted(scene, x, height) and _in_hand(scene, x):
        return _staged(3, _near(across, COARSE_GAIN), stages)
    return _staged(*_pick(scene, x, height), stages)


def _unstack(scene: SceneState, x: str, y: str, flags: dict[str, bool]) -> float:
    """Pick x off y, move it UNSTACK_ASIDE away, lower it onto the table, let go."""
    stages = len(STAGES["unstack"])
    if flags["off"] and flags["on_table"] and flags["apart"]:
        return _staged(5, _settle(scene, x), stages)
    i, j = scene.index(x), scene.index(y)
    centre = scene.block_pos[i].tolist()
    across = _across(centre, scene.block_pos[j].tolist())
    if across >= UNSTACK_ASIDE and _held(scene, x, i):
        drop = centre[2] - TABLE_HEIGHT - scene.block_size / 2
        return _staged(4, _near(abs(drop), FINE_GAIN), stages)
    height = _clear_height(scene, j)
    if lifted(scene, x, height) and _in_hand(scene, x):
        return _staged(3, _near(UNSTACK_ASIDE - across, COARSE_GAIN), stages)
    return _staged(*_pick(scene, x, height), stages)


def _tower(scene: SceneState, colours: tuple[str, ...]) -> float:
    """Levels done plus the stack shaping of the next block, each level a 1/n share."""
    n = len(colours)
    done = levels_done(scene, colours)
    level = min(done, n - 1)
    if level == 0:
        drop = _centre(scene, colours[0])[2] - TABLE_HEIGHT - scene.block_size / 2
        share = PROGRESS_CAP * _near(abs(drop), FINE_GAIN)
    elif done == n:  # built: the top block is on the one below it
        share = _stack(scene, colours[level], colours[level - 1])
    else:  # the next block is not on the built part, or levels_done would have counted it
        share = _stack_unseated(scene, colours[level], colours[level - 1])
    return (level + share) / n


def dense_reward(
    instruction: Instruction, scene: SceneState, start: SceneState | None = None
) -> float:
    """Staged shaping reward in [0, 1] for dense-reward steps; 1.0 exactly on oracle success."""
    if success(instruction, scene, start):
        return 1.0
    return shaping(instruction, scene, start)


def shaping(instruction: Instruction, scene: SceneState, start: SceneState | None = None) -> float:
    """The staged reward in [0, 1) of a scene that is not a success: `dense_reward` after its
    success check, for a caller that has judged success already (the env's step)."""
    skill, objects, relation = instruction.skill, instruction.objects, instruction.relation
    if skill == "reach":
        return _reach(scene, objects[0])
    if skill == "lift":
        return _staged(*_pick(scene, objects[0], LIFT_HEIGHT), len(STAGES["lift"]))
    if skill == "push":  # its stages read the oracle's flags, the one statement of its rule
        return _push(scene, start, objects[0], relation, evaluate(instruction, scene, start))
    if skill == "place":
        return _place(scene, objects[0], objects[1], relation)
    if skill == "stack":
        return _stack(scene, objects[0], objects[1])
    if skill == "unstack":
        return _unstack(scene, objects[0], objects[1], evaluate(instruction, scene, start))
    if skill == "tower":
        return _tower(scene, objects)
    raise ValueError(f"unknown skill {skill!r}")
