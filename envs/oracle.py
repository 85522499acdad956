"""Skill-success oracle: pure predicates over a scene snapshot that decide if a goal is done."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from gameon.envs.language import Instruction, parse

TABLE_HEIGHT = 0.0  #: z of the table top in the world frame, m
BLOCK_SIZE = 0.05  #: edge of a cube block, m

STACK_XY_TOL = 0.03  #: max horizontal centre distance of x over y, m (RGB-stacking standard)
REST_LIN_VEL = 0.02  #: max linear speed of a block at rest, m/s
REST_ANG_VEL = 0.5  #: max angular speed of a block at rest, rad/s
UPRIGHT_COS = math.cos(math.radians(15.0))  #: some face normal within 15 degrees of world z
ON_TABLE_Z_TOL = 0.01  #: max |centre z - size/2| of a block lying on the table, m
LIFT_HEIGHT = 0.08  #: min height of a lifted block's bottom face above the table, m
REACH_XY_TOL = 0.02  #: max horizontal TCP distance from the block centre, m
REACH_Z_RANGE = (0.02, 0.10)  #: TCP height above the block's top face, m
PUSH_DISTANCE = 0.08  #: min block displacement along the push direction, m
PUSH_LATERAL_TOL = 0.05  #: max block drift across the push direction, m
NEXT_TO_RANGE = (0.05, 0.10)  #: centre offset of x from y along the side's axis, m
NEXT_TO_LATERAL_TOL = 0.03  #: max centre offset of x from y across the side's axis, m
CLEAR_DISTANCE = 0.02  #: min TCP distance outside the block's bounding sphere, m

THRESHOLDS: tuple[tuple[str, float | tuple[float, float], str], ...] = (
    ("STACK_XY_TOL", STACK_XY_TOL, "m, max horizontal centre distance of a block over another"),
    ("REST_LIN_VEL", REST_LIN_VEL, "m/s, max linear speed of a block at rest"),
    ("REST_ANG_VEL", REST_ANG_VEL, "rad/s, max angular speed of a block at rest"),
    ("UPRIGHT_COS", UPRIGHT_COS, "cos(15 deg): some face normal within 15 degrees of vertical"),
    ("ON_TABLE_Z_TOL", ON_TABLE_Z_TOL, "m, max centre height error of a block lying on the table"),
    ("LIFT_HEIGHT", LIFT_HEIGHT, "m, min height of a lifted block's bottom face above the table"),
    ("REACH_XY_TOL", REACH_XY_TOL, "m, max horizontal TCP distance from the block centre"),
    ("REACH_Z_RANGE", REACH_Z_RANGE, "m, TCP height above the block's top face"),
    ("PUSH_DISTANCE", PUSH_DISTANCE, "m, min displacement along the push direction"),
    ("PUSH_LATERAL_TOL", PUSH_LATERAL_TOL, "m, max drift across the push direction"),
    ("NEXT_TO_RANGE", NEXT_TO_RANGE, "m, centre offset along the side's axis"),
    ("NEXT_TO_LATERAL_TOL", NEXT_TO_LATERAL_TOL, "m, max centre offset across the side's axis"),
    ("CLEAR_DISTANCE", CLEAR_DISTANCE, "m, min TCP distance outside the block's bounding sphere"),
)

DIRECTION_VECTORS: dict[str, tuple[float, float]] = {
    "left": (0.0, -1.0),
    "right": (0.0, 1.0),
    "forward": (1.0, 0.0),
    "backward": (-1.0, 0.0),
}
SIDE_VECTORS: dict[str, tuple[float, float]] = {
    "left of": (0.0, -1.0),
    "right of": (0.0, 1.0),
    "in front of": (1.0, 0.0),
    "behind": (-1.0, 0.0),
}


@dataclass(frozen=True)
class SceneState:
    """A snapshot of blocks, gripper and contacts: everything the oracle reads, nothing more."""

    colours: tuple[str, ...]
    block_pos: np.ndarray
    block_quat: np.ndarray
    block_linvel: np.ndarray
    block_angvel: np.ndarray
    tcp_pos: np.ndarray
    gripper_opening: float
    touches_table: np.ndarray
    touches_left_finger: np.ndarray
    touches_right_finger: np.ndarray
    touches_robot: np.ndarray
    block_contacts: np.ndarray
    block_size: float = BLOCK_SIZE

    def index(self, colour: str) -> int:
        """Row of the block with this colour, so that a typo fails loudly with the valid names."""
        try:
            return self.colours.index(colour)
        except ValueError:
            scene = ", ".join(self.colours)
            raise ValueError(f"no {colour!r} block in the scene; its colours: {scene}") from None


def _horizontal(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    (ax, ay, _), (bx, by, _) = a.tolist(), b.tolist()
    return ax - bx, ay - by


def tcp_distance(scene: SceneState, i: int) -> float:
    """Distance from the TCP to the centre of the block in row i, m."""
    (tx, ty, tz), (bx, by, bz) = scene.tcp_pos.tolist(), scene.block_pos[i].tolist()
    return math.hypot(tx - bx, ty - by, tz - bz)


def clear_radius(scene: SceneState) -> float:
    """The TCP is clear of a block beyond this distance from its centre: the block's bounding
    sphere padded by CLEAR_DISTANCE, m."""
    return scene.block_size * math.sqrt(3.0) / 2 + CLEAR_DISTANCE


def _unit(table: dict[str, tuple[float, float]], key: str | None, what: str) -> tuple[float, float]:
    """The horizontal unit vector a push direction or a side names (a ValueError lists them)."""
    if key not in table:
        raise ValueError(f"unknown {what} {key!r}; expected one of {', '.join(table)}")
    return table[key]


def at_rest(scene: SceneState, x: str) -> bool:
    """Whether block x has settled, so a success is not counted mid-fall or mid-slide."""
    i = scene.index(x)
    lin = math.hypot(*scene.block_linvel[i].tolist())
    ang = math.hypot(*scene.block_angvel[i].tolist())
    return lin <= REST_LIN_VEL and ang <= REST_ANG_VEL


def upright(scene: SceneState, x: str) -> bool:
    """Whether some face normal of x is within 15 degrees of world z, i.e. x sits flat."""
    w, qx, qy, qz = scene.block_quat[scene.index(x)].tolist()
    norm2 = w * w + qx * qx + qy * qy + qz * qz
    # The third row of the block's rotation matrix, unnormalised: the face normals' z components.
    zx, zy, zz = 2 * (qx * qz - w * qy), 2 * (qy * qz + w * qx), w * w + qz * qz - qx * qx - qy * qy
    return max(abs(zx), abs(zy), abs(zz)) >= UPRIGHT_COS * norm2


def grasped(scene: SceneState, x: str) -> bool:
    """Whether x is pinched, i.e. touches both fingers."""
    i = scene.index(x)
    return bool(scene.touches_left_finger[i] and scene.touches_right_finger[i])


def on_table(scene: SceneState, x: str) -> bool:
    """Whether x lies directly on the table: touching it with its centre half a block above it."""
    i = scene.index(x)
    height = scene.block_pos.item(i, 2) - TABLE_HEIGHT - scene.block_size / 2
    return bool(scene.touches_table[i]) and abs(height) <= ON_TABLE_Z_TOL


def lifted(scene: SceneState, x: str, height: float = LIFT_HEIGHT) -> bool:
    """Whether x's bottom face is at least `height` above the table and x is off it."""
    i = scene.index(x)
    bottom = scene.block_pos.item(i, 2) - scene.block_size / 2
    return bottom >= TABLE_HEIGHT + height and not bool(scene.touches_table[i])


def on(scene: SceneState, x: str, y: str) -> bool:
    """Whether x rests on y alone: centred within 3 cm, one layer up, in contact, flat, unheld."""
    i, j = scene.index(x), scene.index(y)
    size = scene.block_size
    (xi, yi, zi), (xj, yj, zj) = scene.block_pos[i].tolist(), scene.block_pos[j].tolist()
    dz = zi - zj
    return (
        math.hypot(xi - xj, yi - yj) <= STACK_XY_TOL
        and 0.5 * size <= dz <= 1.5 * size
        and bool(scene.block_contacts[i, j])
        and not bool(scene.touches_table[i])
        and not bool(scene.touches_robot[i])
        and upright(scene, x)
    )


def next_to(scene: SceneState, x: str, y: str, side: str) -> bool:
    """Whether x stands on the table beside y on `side` ("left of", ...), roughly one block away."""
    ax, ay = _unit(SIDE_VECTORS, side, "side")
    dx, dy = _horizontal(scene.block_pos[scene.index(x)], scene.block_pos[scene.index(y)])
    along, across = ax * dx + ay * dy, abs(ax * dy - ay * dx)
    return (
        NEXT_TO_RANGE[0] <= along <= NEXT_TO_RANGE[1]
        and across <= NEXT_TO_LATERAL_TOL
        and on_table(scene, x)
        and on_table(scene, y)
    )


def levels_done(scene: SceneState, colours: Sequence[str]) -> int:
    """Tower levels in place from the bottom: the base on the table, then each block on the last."""
    if not colours:
        raise ValueError("a tower needs at least one block")
    for colour in colours:
        scene.index(colour)  # a missing colour fails loudly even when a lower level does not hold
    if not on_table(scene, colours[0]):
        return 0
    done = 1
    for below, top in itertools.pairwise(colours):
        if not on(scene, top, below):
            break
        done += 1
    return done


def tower(scene: SceneState, colours: Sequence[str]) -> bool:
    """Whether the blocks form a tower bottom to top: the first on the table, each on the last."""
    return levels_done(scene, colours) == len(colours)


def gripper_clear(scene: SceneState, x: str) -> bool:
    """Whether the robot let go of x: no robot contact, TCP outside its padded bounding sphere."""
    i = scene.index(x)
    return not bool(scene.touches_robot[i]) and tcp_distance(scene, i) >= clear_radius(scene)


def reached(scene: SceneState, x: str) -> bool:
    """Whether the TCP hovers over x: horizontally near its centre, a little above its top face."""
    i = scene.index(x)
    dx, dy = _horizontal(scene.tcp_pos, scene.block_pos[i])
    height = (scene.tcp_pos.item(2) - scene.block_pos.item(i, 2)) - scene.block_size / 2
    return math.hypot(dx, dy) <= REACH_XY_TOL and REACH_Z_RANGE[0] <= height <= REACH_Z_RANGE[1]


def _push_checks(
    scene: SceneState, start: SceneState, x: str, direction: str | None
) -> Iterator[tuple[str, bool]]:
    ux, uy = _unit(DIRECTION_VECTORS, direction, "push direction")
    dx, dy = _horizontal(scene.block_pos[scene.index(x)], start.block_pos[start.index(x)])
    yield "displaced", ux * dx + uy * dy >= PUSH_DISTANCE
    yield "on_line", abs(ux * dy - uy * dx) <= PUSH_LATERAL_TOL
    yield "on_table", on_table(scene, x)
    yield "at_rest", at_rest(scene, x)
    yield "gripper_clear", gripper_clear(scene, x)


def pushed(scene: SceneState, start: SceneState, x: str, direction: str) -> bool:
    """Whether x slid at least PUSH_DISTANCE in `direction` since `start`, kept down, settled."""
    return all(passed for _, passed in _push_checks(scene, start, x, direction))


def _checks(
    instruction: Instruction, scene: SceneState, start: SceneState | None = None
) -> Iterator[tuple[str, bool]]:
    """The instruction's named conditions in order, each judged only when the caller asks.

    Success is their conjunction; `success` stops at the first that fails, `evaluate` names all.
    """
    skill, objects, relation = instruction.skill, instruction.objects, instruction.relation
    if skill == "reach":
        (x,) = objects
        yield "reached", reached(scene, x)
    elif skill == "lift":
        (x,) = objects
        yield "grasped", grasped(scene, x)
        yield "lifted", lifted(scene, x)
    elif skill == "push":
        if start is None:
            raise ValueError("push success needs the episode's start scene")
        (x,) = objects
        yield from _push_checks(scene, start, x, relation)
    elif skill == "place":
        x, y = objects
        yield "next_to", next_to(scene, x, y, relation)
        yield "at_rest", at_rest(scene, x)
        yield "gripper_clear", gripper_clear(scene, x)
    elif skill == "stack":
        top, bottom = objects
        yield "on", on(scene, top, bottom)
        yield "at_rest", at_rest(scene, top)
        yield "gripper_clear", gripper_clear(scene, top)
    elif skill == "unstack":
        top, bottom = objects
        yield "off", not on(scene, top, bottom)
        yield "on_table", on_table(scene, top)
        yield "apart", not bool(scene.block_contacts[scene.index(top), scene.index(bottom)])
        yield "at_rest", at_rest(scene, top)
        yield "gripper_clear", gripper_clear(scene, top)
    elif skill == "tower":
        yield "tower", tower(scene, objects)
        yield "at_rest", all(at_rest(scene, c) for c in objects)
        yield "gripper_clear", gripper_clear(scene, objects[-1])
    else:
        raise ValueError(f"unknown skill {skill!r}")


def evaluate(
    instruction: Instruction | str, scene: SceneState, start: SceneState | None = None
) -> dict[str, bool]:
    """Named flags whose conjunction is the instruction's success (plus "success"), for rewards.
    The instruction may be its text (`info["instruction"]`, a recorded episode's)."""
    if isinstance(instruction, str):
        instruction = parse(instruction)
    flags = dict(_checks(instruction, scene, start))
    flags["success"] = all(flags.values())
    return flags


def success(
    instruction: Instruction | str, scene: SceneState, start: SceneState | None = None
) -> bool:
    """Whether the instruction (or its text) is achieved in `scene`; push compares against
    `start`.

    Judges the conditions in order and stops at the first that fails: the env calls it every step
    (and a plain loop costs half of `all` over a generator expression).
    """
    if isinstance(instruction, str):
        instruction = parse(instruction)
    for _, passed in _checks(instruction, scene, start):  # noqa: SIM110
        if not passed:
            return False
    return True
