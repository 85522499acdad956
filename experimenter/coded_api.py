"""The API a coded skill sees: a read-only scene view and motion primitives that emit env actions.

A coded skill is Python source written by a language model that defines `def skill(blocks):`;
it runs in the sandbox's child process (`gameon.experimenter.sandbox`), so this module imports
only the standard library. The primitives turn goals in metres (world frame) into the env's
5-d velocity actions, one per env step, through a `Channel` that sends each action and receives
the scene after it. `scene_message` builds that scene, a JSON-able dict, on the env's side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

MAX_SPEED = 0.3
"""TCP speed at |action| = 1, m/s per axis (`controller.MAX_SPEED`)."""
MAX_YAW_RATE = 2.0
"""Hand yaw rate at |action| = 1, rad/s (`controller.MAX_YAW_RATE`)."""
CONTROL_DT = 0.05
"""Seconds per env step (`world.CONTROL_DT`)."""
YAW_LIMIT = math.pi / 2
"""The hand's yaw stays within +-this, rad (`controller.YAW_LIMIT`)."""
WORKSPACE_LOW = (0.30, -0.25, 0.005)
"""Lowest TCP position the env allows, m (`world.WORKSPACE_LOW`)."""
WORKSPACE_HIGH = (0.75, 0.25, 0.40)
"""Highest TCP position the env allows, m (`world.WORKSPACE_HIGH`)."""
STEP_DISTANCE = MAX_SPEED * CONTROL_DT
STEP_YAW = MAX_YAW_RATE * CONTROL_DT
YAW_TOLERANCE = 0.05
"""move_to and rotate_to count the hand's yaw as reached within this, rad."""
MAX_PRIMITIVE_STEPS = 1000
OPEN, CLOSED = -1.0, 1.0

API_REFERENCE = """\
# Coded skill API

Write Python source that defines `def skill(blocks):`. `blocks` lists the colour names the
instruction names, in order: "stack the red block on the blue block" gives ["red", "blue"].
The skill acts only through the functions below and returns when it is done. Allowed: plain
functions, arithmetic, if/for/while, lists, dicts, tuples, comprehensions, try/except and the
builtins abs, min, max, sum, round, len, range, enumerate, zip, sorted, any, all, float, int,
str, bool, list, dict, tuple, isinstance, print (captured, bounded), the common exception
classes (Exception, ValueError, KeyError, ...) and the module `math`.
Not allowed: import, classes, global/nonlocal, names or attributes starting with "_", open,
eval, exec, getattr and the like. A skill that breaks a rule, raises, loops too long or sends
a bad action is rejected with the reason.

Units are metres and radians, in the world frame: the robot's base is at the origin, +x points
away from the robot (toward the front camera: "in front of", "forward"), +y is to the right
seen from the front camera, +z is up, the table top is at z = 0. Blocks are 5 cm cubes
(`block.size`) standing in x 0.38 to 0.68, y -0.18 to 0.18. The TCP (tool-centre point,
between the fingertips) can go to x 0.30 to 0.75, y -0.25 to 0.25, z 0.005 to 0.40; targets
outside are clamped. It moves at most 1.5 cm per step per axis (0.3 m/s, 20 steps a second).
The hand always points down; its yaw turns at most 0.1 rad per step, within -pi/2 to pi/2.

## Scene

- `scene()`: the current scene, refreshed after every step. Read-only.
  - `scene().blocks`: a mapping colour -> block; `scene().block(colour)` raises a clear error
    for a colour that is not there.
  - `block.x, block.y, block.z`: the block's centre, m (z = 0.025 on the table).
  - `block.yaw`: its yaw modulo 90 degrees, in [-pi/4, pi/4): turn the hand to it to grasp.
  - `block.size`: edge length, m. `block.grasped`: True when both finger pads touch it.
  - `scene().tcp`: the TCP position (`.x`, `.y`, `.z`). `scene().hand_yaw`: the hand's yaw.
  - `scene().gripper`: the gripper opening, m (0.08 open, 0 closed).
  - `scene().held()`: the colour of the grasped block, or None.
- `relation()`: the instruction's side for place ("left of", "right of", "in front of",
  "behind") or direction for push ("left", "right", "forward", "backward"); else None.

## Motion (each call takes env steps; the gripper keeps its last command while moving)

The gripper's command starts closed if a block is already grasped, else open.

- `move_to(x, y, z, speed=1.0, yaw=None, tolerance=0.005, max_steps=100)`: drive the TCP
  toward (x, y, z), each axis at up to the top speed (so a long diagonal move is not straight:
  the axes with less to go arrive first), and the hand's yaw toward `yaw` if given, until within
  `tolerance` m (and 0.05 rad) or `max_steps` steps. `speed` in (0, 1] scales the top speed;
  use about 0.35 for the last few centimetres before grasping or releasing. Returns True if
  it arrived.
- `rotate_to(yaw, max_steps=40)`: turn the hand in place; returns True if it arrived.
- `open_gripper()`: open fully (3 to 12 steps).
- `close_gripper()`: close until the fingers stop (3 to 12 steps); returns True if a block
  is grasped.
- `wait(steps)`: hold still for a number of steps.
- `send_action(action)`: one raw env step: a list of 5 numbers in [-1, 1]: vx, vy, vz, yaw rate
  (fractions of the top speeds) and gripper (-1 open, 1 closed); its gripper number is the
  command the other primitives keep from then on.

## Tips

Grasp a block by hovering 10 cm above its centre with the hand turned to `block.yaw`, moving
down slowly to 8 mm above its centre, closing, then lifting. A held block keeps its offset
from the TCP: to put its centre at point p, move the TCP to p + (tcp - block). Lift a carried
block well clear (TCP z about 0.2) before moving sideways, and turn it square to the world axes
(hand yaw minus block yaw) before putting it down beside another. Release it 1 cm above its
resting place, then move up at least 10 cm so the gripper is clear.

## Example: place `blocks[0]` 7.5 cm to the right of (+y) `blocks[1]`

```python
def skill(blocks):
    top, ref = blocks[0], blocks[1]
    b = scene().block(top)
    move_to(b.x, b.y, b.z + 0.10, yaw=b.yaw, tolerance=0.01)
    b = scene().block(top)
    move_to(b.x, b.y, b.z + 0.008, speed=0.35, yaw=b.yaw)
    if not close_gripper():
        open_gripper()
        return
    tcp = scene().tcp
    move_to(tcp.x, tcp.y, 0.2, tolerance=0.02)
    s = scene()
    yaw = s.hand_yaw - s.block(top).yaw
    r = s.block(ref)
    gx, gy, gz = r.x, r.y + 0.075, r.size / 2
    move_to(gx, gy, 0.2, yaw=yaw, tolerance=0.01)
    s = scene()
    held = s.block(top)
    dx, dy, dz = s.tcp.x - held.x, s.tcp.y - held.y, s.tcp.z - held.z
    move_to(gx + dx, gy + dy, gz + dz + 0.03, yaw=yaw, tolerance=0.006)
    move_to(gx + dx, gy + dy, gz + dz + 0.012, speed=0.35, tolerance=0.004, max_steps=40)
    open_gripper()
    tcp = scene().tcp
    move_to(tcp.x, tcp.y, tcp.z + 0.10, tolerance=0.015)
```
"""


class Point(NamedTuple):
    """A position in the world frame, m."""

    x: float
    y: float
    z: float


@dataclass(frozen=True)
class Block:
    """One block as a coded skill sees it: centre (m), yaw modulo 90 degrees, size, grasp."""

    colour: str
    x: float
    y: float
    z: float
    yaw: float
    size: float
    grasped: bool


@dataclass(frozen=True)
class Scene:
    """A read-only snapshot of the blocks, the TCP and the gripper."""

    blocks: Mapping[str, Block]
    tcp: Point
    hand_yaw: float
    gripper: float

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> Scene:
        """Build the view from a `scene_message` dict."""
        blocks = {
            colour: Block(
                colour=str(colour),
                x=float(block["pos"][0]),
                y=float(block["pos"][1]),
                z=float(block["pos"][2]),
                yaw=float(block["yaw"]),
                size=float(block["size"]),
                grasped=bool(block["grasped"]),
            )
            for colour, block in message["blocks"].items()
        }
        return cls(
            blocks=MappingProxyType(blocks),
            tcp=Point(*(float(v) for v in message["tcp"])),
            hand_yaw=float(message["hand_yaw"]),
            gripper=float(message["gripper"]),
        )

    def block(self, colour: str) -> Block:
        """The block of this colour; a missing colour fails with the scene's colours."""
        if colour not in self.blocks:
            raise KeyError(f"no {colour!r} block in the scene; its colours: {list(self.blocks)}")
        return self.blocks[colour]

    def held(self) -> str | None:
        """The colour of the grasped block, or None."""
        return next((c for c, b in self.blocks.items() if b.grasped), None)


def cube_yaw(quat: tuple[float, float, float, float]) -> float:
    """Yaw of a cube from its (w, x, y, z) quaternion, modulo its 90-degree symmetry."""
    w, x, y, z = quat
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return (yaw + math.pi / 4) % (math.pi / 2) - math.pi / 4


def scene_message(env: Any) -> dict[str, Any]:
    """The JSON-able scene a coded skill receives, from a StackingEnv (wrapped or not)."""
    env = getattr(env, "unwrapped", env)
    scene = env.scene()
    return {
        "tcp": [float(v) for v in scene.tcp_pos],
        "hand_yaw": float(env.controller.hand_yaw()),
        "gripper": float(scene.gripper_opening),
        "blocks": {
            colour: {
                "pos": [float(v) for v in scene.block_pos[i]],
                "yaw": cube_yaw(tuple(float(v) for v in scene.block_quat[i])),
                "size": float(scene.block_size),
                "grasped": bool(scene.touches_left_finger[i] and scene.touches_right_finger[i]),
            }
            for i, colour in enumerate(scene.colours)
        },
    }


class Channel:
    """The skill's end of the link to the env: sends one action, receives the next scene."""

    def __init__(self, exchange: Callable[[list[Any]], Mapping[str, Any]]) -> None:
        self._exchange = exchange
        self._message: Mapping[str, Any] | None = None
        self._scene: Scene | None = None
        self.grip = OPEN
        self.steps = 0

    def _require_started(self) -> None:
        if self._message is None:
            raise RuntimeError("the API works only inside skill(), not at the top of the source")

    def begin(self, message: Mapping[str, Any]) -> None:
        """Take the first scene; the API works only after this. The gripper's command starts
        closed when a block is already held, so a skill that follows a pick keeps it."""
        self._message, self._scene = message, None
        self.grip = CLOSED if self.scene.held() is not None else OPEN

    @property
    def scene(self) -> Scene:
        self._require_started()
        if self._scene is None:
            self._scene = Scene.from_message(self._message)
        return self._scene

    def step(self, action: list[Any]) -> Scene:
        """Send one action and wait for the scene after it."""
        self._require_started()
        self._message, self._scene = self._exchange(action), None
        self.steps += 1
        return self.scene


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return min(value, MAX_PRIMITIVE_STEPS)


def _clip(value: float, bound: float) -> float:
    return min(max(value, -bound), bound)


def make_api(channel: Channel, relation: str | None = None) -> dict[str, Any]:
    """The globals a coded skill runs with: the primitives bound to one channel, and `math`."""

    def scene() -> Scene:
        """The current scene."""
        return channel.scene

    def send_action(action: list[Any]) -> Scene:
        """One raw env step; the env's side checks the action. Its gripper entry becomes the
        command the primitives keep, as the API reference promises ("the gripper keeps its last
        command"): a block closed on by raw actions is not dropped by the next move_to."""
        action = list(action) if isinstance(action, (list, tuple)) else action
        scene = channel.step(action)
        channel.grip = float(action[4])  # the env's side accepted it: a number in [-1, 1]
        return scene

    def move_to(
        x: float,
        y: float,
        z: float,
        speed: float = 1.0,
        yaw: float | None = None,
        tolerance: float = 0.005,
        max_steps: int = 100,
    ) -> bool:
        """Drive the TCP toward (x, y, z) (and the hand toward yaw); True if it arrived."""
        goal = [
            min(max(_finite(v, name), low), high)
            for v, name, low, high in zip(
                (x, y, z), "xyz", WORKSPACE_LOW, WORKSPACE_HIGH, strict=True
            )
        ]
        speed = min(max(_finite(speed, "speed"), 0.01), 1.0)
        tolerance = max(_finite(tolerance, "tolerance"), 0.001)
        goal_yaw = None if yaw is None else _clip(_finite(yaw, "yaw"), YAW_LIMIT)
        steps = _count(max_steps, "max_steps")
        for step in range(steps + 1):
            now = channel.scene
            error = [g - t for g, t in zip(goal, now.tcp, strict=True)]
            yaw_error = 0.0 if goal_yaw is None else goal_yaw - now.hand_yaw
            if math.hypot(*error) < tolerance and abs(yaw_error) < YAW_TOLERANCE:
                return True
            if step == steps:
                return False
            velocity = [_clip(e / STEP_DISTANCE, speed) for e in error]
            channel.step([*velocity, _clip(yaw_error / STEP_YAW, 1.0), channel.grip])
        return False

    def rotate_to(yaw: float, max_steps: int = 40) -> bool:
        """Turn the hand in place toward yaw; True if it arrived."""
        goal = _clip(_finite(yaw, "yaw"), YAW_LIMIT)
        steps = _count(max_steps, "max_steps")
        for step in range(steps + 1):
            error = goal - channel.scene.hand_yaw
            if abs(error) < YAW_TOLERANCE:
                return True
            if step == steps:
                return False
            channel.step([0.0, 0.0, 0.0, _clip(error / STEP_YAW, 1.0), channel.grip])
        return False

    def actuate(grip: float) -> None:
        channel.grip = grip
        last = channel.scene.gripper
        for step in range(12):
            now = channel.step([0.0, 0.0, 0.0, 0.0, grip]).gripper
            if step >= 2 and abs(now - last) < 0.0005:
                return
            last = now

    def open_gripper() -> None:
        """Open the gripper fully."""
        actuate(OPEN)

    def close_gripper() -> bool:
        """Close the gripper until the fingers stop; True if a block is grasped."""
        actuate(CLOSED)
        return channel.scene.held() is not None

    def wait(steps: int) -> None:
        """Hold still for some steps, keeping the gripper's command."""
        for _ in range(_count(steps, "steps")):
            channel.step([0.0, 0.0, 0.0, 0.0, channel.grip])

    def get_relation() -> str | None:
        """The instruction's side (place) or direction (push), else None."""
        return relation

    return {
        "scene": scene,
        "relation": get_relation,
        "move_to": move_to,
        "rotate_to": rotate_to,
        "open_gripper": open_gripper,
        "close_gripper": close_gripper,
        "wait": wait,
        "send_action": send_action,
        "math": math,
    }


_PICK = """\
def pick(colour):
    for attempt in range(3):
        b = scene().block(colour)
        move_to(b.x, b.y, b.z + 0.10, yaw=b.yaw, tolerance=0.01)
        b = scene().block(colour)
        move_to(b.x, b.y, b.z + 0.008, speed=0.35, yaw=b.yaw)
        if close_gripper():
            return True
        open_gripper()
        tcp = scene().tcp
        move_to(tcp.x, tcp.y, tcp.z + 0.05, tolerance=0.01)
    return False
"""

_PUT = """\
def put(colour, gx, gy, gz, gyaw):
    s = scene()
    tcp, held = s.tcp, s.block(colour)
    turn = (gyaw - held.yaw + math.pi / 4) % (math.pi / 2) - math.pi / 4
    yaw = s.hand_yaw + turn
    move_to(tcp.x, tcp.y, 0.2, tolerance=0.02)
    s = scene()
    tcp, held = s.tcp, s.block(colour)
    dx, dy, dz = tcp.x - held.x, tcp.y - held.y, tcp.z - held.z
    move_to(gx + dx, gy + dy, 0.2, yaw=yaw, tolerance=0.01)
    s = scene()
    tcp, held = s.tcp, s.block(colour)
    dx, dy, dz = tcp.x - held.x, tcp.y - held.y, tcp.z - held.z
    move_to(gx + dx, gy + dy, gz + dz + 0.03, yaw=yaw, tolerance=0.006)
    move_to(gx + dx, gy + dy, gz + dz + 0.012, speed=0.35, tolerance=0.004, max_steps=40)
    open_gripper()
    b = scene().block(colour)
    move_to(b.x, b.y, b.z + 0.10, tolerance=0.015)
"""

TEMPLATES: dict[str, str] = {
    "reach": """\
def skill(blocks):
    b = scene().block(blocks[0])
    move_to(b.x, b.y, b.z + 0.06)
""",
    "lift": _PICK
    + """
def skill(blocks):
    if pick(blocks[0]):
        tcp = scene().tcp
        move_to(tcp.x, tcp.y, tcp.z + 0.15, tolerance=0.01)
""",
    "place": _PICK
    + "\n"
    + _PUT
    + """
SIDES = {"left of": (0, -1), "right of": (0, 1), "in front of": (1, 0), "behind": (-1, 0)}


def skill(blocks):
    ux, uy = SIDES[relation()]
    if pick(blocks[0]):
        r = scene().block(blocks[1])
        put(blocks[0], r.x + 0.075 * ux, r.y + 0.075 * uy, r.size / 2, 0.0)
""",
    "stack": _PICK
    + "\n"
    + _PUT
    + """
def skill(blocks):
    if pick(blocks[0]):
        b = scene().block(blocks[1])
        put(blocks[0], b.x, b.y, b.z + b.size, b.yaw)
""",
}
"""Working coded-skill sources for reach, lift, place (block 0 beside block 1 on the
instruction's side) and stack (block 0 on block 1)."""
