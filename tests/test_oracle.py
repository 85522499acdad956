"""Skill-success oracle on hand-built scenes whose contact flags follow from the geometry."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest
from timing import MAX_SHARE_OF_PHYSICS_STEP, share_of_physics_step

from gameon.envs import oracle
from gameon.envs.language import DIRECTIONS, SIDES, Instruction, parse
from gameon.envs.oracle import (
    BLOCK_SIZE,
    DIRECTION_VECTORS,
    SIDE_VECTORS,
    THRESHOLDS,
    SceneState,
    at_rest,
    evaluate,
    grasped,
    gripper_clear,
    lifted,
    next_to,
    on,
    on_table,
    pushed,
    reached,
    success,
    tower,
    upright,
)
from gameon.envs.rewards import dense_reward

HALF = BLOCK_SIZE / 2
CONTACT_TOL = 1e-3
FAR_TCP = (0.3, 0.0, 0.4)


def _quat(yaw_deg: float, tilt_deg: float) -> np.ndarray:
    """Yaw about world z after a tilt about the block's x axis, as a wxyz quaternion."""
    cz, sz = math.cos(math.radians(yaw_deg) / 2), math.sin(math.radians(yaw_deg) / 2)
    cx, sx = math.cos(math.radians(tilt_deg) / 2), math.sin(math.radians(tilt_deg) / 2)
    return np.array([cz * cx, cz * sx, sz * sx, sz * cx])


def _rotation(q: np.ndarray) -> np.ndarray:
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def make_scene(
    blocks: dict[str, tuple[float, float, float]],
    *,
    yaw: dict[str, float] | None = None,
    tilt: dict[str, float] | None = None,
    linvel: dict[str, tuple[float, float, float]] | None = None,
    angvel: dict[str, tuple[float, float, float]] | None = None,
    held: tuple[str, ...] = (),
    robot: tuple[str, ...] = (),
    tcp: tuple[float, float, float] = FAR_TCP,
) -> SceneState:
    """Build a snapshot whose table and block contacts follow from the blocks' bounding boxes.

    A block touches the table when its lowest corner is within 1 mm of z = 0; two blocks touch
    when their boxes overlap horizontally and one's bottom meets the other's top within 1 mm.
    `held` blocks touch both fingers, `robot` blocks some other robot geom.
    """
    colours = tuple(blocks)
    n = len(colours)
    yaw, tilt, linvel, angvel = yaw or {}, tilt or {}, linvel or {}, angvel or {}
    pos = np.array([blocks[c] for c in colours], dtype=float)
    quat = np.array([_quat(yaw.get(c, 0.0), tilt.get(c, 0.0)) for c in colours])
    corners = np.array(list(itertools.product((-HALF, HALF), repeat=3)))
    lows, highs = [], []
    for p, q in zip(pos, quat, strict=True):
        world = p + corners @ _rotation(q).T
        lows.append(world.min(axis=0))
        highs.append(world.max(axis=0))
    contacts = np.zeros((n, n), bool)
    for i, j in itertools.permutations(range(n), 2):
        overlap = all(
            min(highs[i][k], highs[j][k]) - max(lows[i][k], lows[j][k]) > 0 for k in (0, 1)
        )
        meet = (
            abs(lows[i][2] - highs[j][2]) <= CONTACT_TOL
            or abs(lows[j][2] - highs[i][2]) <= CONTACT_TOL
        )
        contacts[i, j] = overlap and meet
    fingers = np.array([c in held for c in colours])
    return SceneState(
        colours=colours,
        block_pos=pos,
        block_quat=quat,
        block_linvel=np.array([linvel.get(c, (0.0, 0.0, 0.0)) for c in colours], dtype=float),
        block_angvel=np.array([angvel.get(c, (0.0, 0.0, 0.0)) for c in colours], dtype=float),
        tcp_pos=np.array(tcp, dtype=float),
        gripper_opening=BLOCK_SIZE if held else 0.08,
        touches_table=np.array([abs(low[2] - oracle.TABLE_HEIGHT) <= CONTACT_TOL for low in lows]),
        touches_left_finger=fingers.copy(),
        touches_right_finger=fingers.copy(),
        touches_robot=fingers | np.array([c in robot for c in colours]),
        block_contacts=contacts,
    )


def layer(k: int) -> float:
    """Centre height of an upright block k layers above the table."""
    return HALF + k * BLOCK_SIZE


def stack_scene(top_offset: float = 0.0, **kwargs) -> SceneState:
    return make_scene({"red": (0.5, 0.0, layer(0)), "blue": (0.5, top_offset, layer(1))}, **kwargs)


STACK = Instruction("stack", ("blue", "red"))
TOWER = Instruction("tower", ("red", "green", "blue"))


EDGE = 0.001
"""How far inside or outside a threshold the boundary scenes sit, in its unit (m, m/s, rad/s)."""


@dataclass(frozen=True)
class Boundary:
    """Two scenes either side of one end ("min" or "max") of a threshold of the oracle: the
    instruction succeeds in `inside`, and in `outside` only `flag` (and so success) turns false."""

    threshold: str
    end: str
    instruction: Instruction
    flag: str
    inside: SceneState
    outside: SceneState
    start: SceneState | None = None

    @property
    def label(self) -> str:
        return f"{self.threshold}-{self.end}"


def resting_on_an_edge(tilt_deg: float) -> float:
    """Centre height above its support of a block tilted about one horizontal axis, on an edge."""
    tilt = math.radians(tilt_deg)
    return HALF * (math.cos(tilt) + math.sin(tilt))


def blue_tilted_on_red(tilt_deg: float) -> SceneState:
    """Blue tilted about its x axis, its lowest edge resting on red's top face."""
    blue = (0.5, 0.0, BLOCK_SIZE + resting_on_an_edge(tilt_deg))
    return make_scene({"red": (0.5, 0.0, layer(0)), "blue": blue}, tilt={"blue": tilt_deg})


def blue_tilted_beside_red(tilt_deg: float) -> SceneState:
    """Blue 10 cm right of red, tilted about its x axis, resting on one edge on the table."""
    blue = (0.5, 0.1, resting_on_an_edge(tilt_deg))
    return make_scene({"red": (0.5, 0.0, HALF), "blue": blue}, tilt={"blue": tilt_deg})


def blue_held_with_bottom_at(height: float) -> SceneState:
    """Blue pinched by both fingers, its bottom face `height` above the table."""
    centre = (0.5, 0.0, height + HALF)
    return make_scene({"blue": centre}, held=("blue",), tcp=centre)


def blue_beside_red(forward: float, right: float) -> SceneState:
    """Both blocks on the table, blue's centre offset from red's by (forward, right)."""
    return make_scene({"red": (0.5, 0.0, HALF), "blue": (0.5 + forward, right, HALF)})


def tcp_over_red(aside: float, height: float) -> SceneState:
    """The TCP `aside` forward of red's centre and `height` above its top face."""
    return make_scene({"red": (0.5, 0.0, HALF)}, tcp=(0.5 + aside, 0.0, BLOCK_SIZE + height))


def tcp_above_stacked_blue(gap: float) -> SceneState:
    """Blue stacked on red, the TCP straight above it, `gap` outside its bounding sphere."""
    radius = BLOCK_SIZE * math.sqrt(3.0) / 2
    return stack_scene(tcp=(0.5, 0.0, layer(1) + radius + gap))


def red_pushed_to(forward: float, right: float) -> SceneState:
    """Red on the table, moved by (forward, right) from PUSH_START."""
    return make_scene({"red": (0.5 + forward, right, HALF)})


PUSH_START = red_pushed_to(0.0, 0.0)
PUSH_RIGHT = Instruction("push", ("red",), "right")
PLACE_RIGHT = Instruction("place", ("blue", "red"), "right of")
REACH = Instruction("reach", ("red",))
LIFT = Instruction("lift", ("blue",))
UNSTACK = Instruction("unstack", ("blue", "red"))
BOUNDARIES = (
    Boundary(
        "STACK_XY_TOL", "max", STACK, "on", stack_scene(0.03 - EDGE), stack_scene(0.03 + EDGE)
    ),
    Boundary(
        "REST_LIN_VEL",
        "max",
        STACK,
        "at_rest",
        stack_scene(linvel={"blue": (0.02 - EDGE, 0.0, 0.0)}),
        stack_scene(linvel={"blue": (0.02 + EDGE, 0.0, 0.0)}),
    ),
    Boundary(
        "REST_ANG_VEL",
        "max",
        STACK,
        "at_rest",
        stack_scene(angvel={"blue": (0.0, 0.0, 0.5 - EDGE)}),
        stack_scene(angvel={"blue": (0.0, 0.0, 0.5 + EDGE)}),
    ),
    Boundary("UPRIGHT_COS", "min", STACK, "on", blue_tilted_on_red(14), blue_tilted_on_red(16)),
    # Leaning on an edge lifts a block's centre by 9.8 mm at 35 degrees and by 10.4 mm at 45.
    Boundary(
        "ON_TABLE_Z_TOL",
        "max",
        UNSTACK,
        "on_table",
        blue_tilted_beside_red(35),
        blue_tilted_beside_red(45),
    ),
    Boundary(
        "LIFT_HEIGHT",
        "min",
        LIFT,
        "lifted",
        blue_held_with_bottom_at(0.08 + EDGE),
        blue_held_with_bottom_at(0.08 - EDGE),
    ),
    Boundary(
        "REACH_XY_TOL",
        "max",
        REACH,
        "reached",
        tcp_over_red(0.02 - EDGE, 0.05),
        tcp_over_red(0.02 + EDGE, 0.05),
    ),
    Boundary(
        "REACH_Z_RANGE",
        "min",
        REACH,
        "reached",
        tcp_over_red(0.0, 0.02 + EDGE),
        tcp_over_red(0.0, 0.02 - EDGE),
    ),
    Boundary(
        "REACH_Z_RANGE",
        "max",
        REACH,
        "reached",
        tcp_over_red(0.0, 0.10 - EDGE),
        tcp_over_red(0.0, 0.10 + EDGE),
    ),
    Boundary(
        "PUSH_DISTANCE",
        "min",
        PUSH_RIGHT,
        "displaced",
        red_pushed_to(0.0, 0.08 + EDGE),
        red_pushed_to(0.0, 0.08 - EDGE),
        PUSH_START,
    ),
    Boundary(
        "PUSH_LATERAL_TOL",
        "max",
        PUSH_RIGHT,
        "on_line",
        red_pushed_to(0.05 - EDGE, 0.1),
        red_pushed_to(0.05 + EDGE, 0.1),
        PUSH_START,
    ),
    # The minimum is one block width, so the outside scene has the cubes 1 mm into each other:
    # the oracle judges the centres' offset, not the boxes.
    Boundary(
        "NEXT_TO_RANGE",
        "min",
        PLACE_RIGHT,
        "next_to",
        blue_beside_red(0.0, 0.05 + EDGE),
        blue_beside_red(0.0, 0.05 - EDGE),
    ),
    Boundary(
        "NEXT_TO_RANGE",
        "max",
        PLACE_RIGHT,
        "next_to",
        blue_beside_red(0.0, 0.10 - EDGE),
        blue_beside_red(0.0, 0.10 + EDGE),
    ),
    Boundary(
        "NEXT_TO_LATERAL_TOL",
        "max",
        PLACE_RIGHT,
        "next_to",
        blue_beside_red(0.03 - EDGE, 0.07),
        blue_beside_red(0.03 + EDGE, 0.07),
    ),
    Boundary(
        "CLEAR_DISTANCE",
        "min",
        STACK,
        "gripper_clear",
        tcp_above_stacked_blue(0.02 + EDGE),
        tcp_above_stacked_blue(0.02 - EDGE),
    ),
)


@pytest.mark.parametrize("case", BOUNDARIES, ids=lambda case: case.label)
def test_verdict_flips_across_each_threshold_on_its_flag_alone(case: Boundary) -> None:
    inside = evaluate(case.instruction, case.inside, case.start)
    outside = evaluate(case.instruction, case.outside, case.start)
    assert inside["success"], inside
    assert outside == {**inside, case.flag: False, "success": False}


def test_every_threshold_in_the_readme_table_has_boundary_scenes() -> None:
    """README's threshold table is generated from THRESHOLDS (tests/test_cli.py checks it)."""
    assert {case.threshold for case in BOUNDARIES} == {name for name, _, _ in THRESHOLDS}


def test_relation_tables_cover_the_grammar() -> None:
    assert set(DIRECTION_VECTORS) == set(DIRECTIONS)
    assert set(SIDE_VECTORS) == set(SIDES)


@pytest.mark.parametrize(("offset", "expected"), [(0.0, True), (0.02, True), (0.04, False)])
def test_stack_horizontal_tolerance(offset: float, expected: bool) -> None:
    scene = stack_scene(offset)
    assert scene.block_contacts[0, 1] and scene.block_contacts[1, 0]
    assert success(STACK, scene) is expected
    assert success(parse("stack the blue block on the red block"), scene) is expected


def test_stack_is_directional() -> None:
    assert not success(Instruction("stack", ("red", "blue")), stack_scene())


def test_the_oracle_judges_an_instruction_given_as_its_text() -> None:
    """Recorded data holds the instruction as text (`info["instruction"]`)."""
    text = "build a tower of red, green and blue from the bottom up"
    exact = {
        "red": (0.5, 0.0, layer(0)),
        "green": (0.5, 0.0, layer(1)),
        "blue": (0.5, 0.0, layer(2)),
    }
    assert success(text, make_scene(exact)) and evaluate(text, make_scene(exact))["success"]
    assert not success("stack the red block on the blue block", stack_scene())
    with pytest.raises(ValueError, match="stack the red blok"):
        success("stack the red blok on the blue block", stack_scene())


def test_tilted_top_block_is_not_stacked() -> None:
    lift_by = HALF * (math.cos(math.radians(20)) + math.sin(math.radians(20))) - HALF
    scene = make_scene(
        {"red": (0.5, 0.0, layer(0)), "blue": (0.5, 0.0, layer(1) + lift_by)}, tilt={"blue": 20}
    )
    assert scene.block_contacts[1, 0]
    assert not upright(scene, "blue")
    assert upright(make_scene({"blue": (0.5, 0.0, 0.1)}, tilt={"blue": 10}), "blue")
    assert upright(
        make_scene({"blue": (0.5, 0.0, HALF)}, tilt={"blue": 90}, yaw={"blue": 30}), "blue"
    )
    flags = evaluate(STACK, scene)
    assert flags == {"on": False, "at_rest": True, "gripper_clear": True, "success": False}


def test_tower_of_three() -> None:
    exact = {
        "red": (0.5, 0.0, layer(0)),
        "green": (0.5, 0.0, layer(1)),
        "blue": (0.5, 0.0, layer(2)),
    }
    assert tower(make_scene(exact), ("red", "green", "blue"))
    assert success(TOWER, make_scene(exact))
    assert success(
        parse("build a tower of red, green and blue from the bottom up"), make_scene(exact)
    )
    assert not success(Instruction("tower", ("blue", "green", "red")), make_scene(exact))

    middle_off = dict(exact, green=(0.5, 0.04, layer(1)), blue=(0.5, 0.04, layer(2)))
    assert not success(TOWER, make_scene(middle_off))

    moving = make_scene(exact, angvel={"green": (0.0, 0.0, 1.0)})
    assert evaluate(TOWER, moving) == {
        "tower": True,
        "at_rest": False,
        "gripper_clear": True,
        "success": False,
    }


def test_toppled_tower_fails() -> None:
    scene = make_scene(
        {"red": (0.5, 0.0, layer(0)), "green": (0.5, 0.0, layer(1)), "blue": (0.5, 0.08, HALF)},
        tilt={"blue": 90},
    )
    assert on(scene, "green", "red")
    assert on_table(scene, "blue")
    assert not success(TOWER, scene)


def test_held_block_above_target_is_not_stacked_but_lifted_when_high() -> None:
    hover = layer(1) + 0.004
    scene = make_scene(
        {"red": (0.5, 0.0, layer(0)), "blue": (0.5, 0.0, hover)},
        held=("blue",),
        tcp=(0.5, 0.0, hover),
    )
    assert not scene.block_contacts[1, 0]
    assert grasped(scene, "blue")
    assert not gripper_clear(scene, "blue")
    assert not success(STACK, scene)
    assert not success(Instruction("lift", ("blue",)), scene)

    high = layer(0) + oracle.LIFT_HEIGHT + 0.01
    raised = make_scene(
        {"red": (0.5, 0.0, layer(0)), "blue": (0.5, 0.0, high)},
        held=("blue",),
        tcp=(0.5, 0.0, high),
    )
    assert lifted(raised, "blue")
    assert evaluate(Instruction("lift", ("blue",)), raised) == {
        "grasped": True,
        "lifted": True,
        "success": True,
    }
    dropped = make_scene({"blue": (0.5, 0.0, high)})
    assert not success(Instruction("lift", ("blue",)), dropped)


def test_bridging_block_is_on_neither_support() -> None:
    """A block laid across two supports 7 cm apart touches both but sits 3.5 cm off each centre.

    RGB-stacking counts a block as stacked only when it is within 3 cm of the one below, so a
    bridge is not a stack on either support even though contact and height both qualify.
    """
    scene = make_scene(
        {
            "red": (0.5, -0.035, layer(0)),
            "green": (0.5, 0.035, layer(0)),
            "blue": (0.5, 0.0, layer(1)),
        }
    )
    assert scene.block_contacts[2, 0] and scene.block_contacts[2, 1]
    assert not scene.touches_table[2]
    assert not on(scene, "blue", "red")
    assert not on(scene, "blue", "green")
    assert not success(STACK, scene)
    assert not success(Instruction("stack", ("blue", "green")), scene)


def test_moving_block_is_not_at_rest() -> None:
    scene = stack_scene(linvel={"blue": (0.1, 0.0, 0.0)})
    assert not at_rest(scene, "blue")
    assert on(scene, "blue", "red")
    assert not success(STACK, scene)
    assert at_rest(stack_scene(linvel={"blue": (0.01, 0.0, 0.0)}), "blue")


def test_stack_needs_the_gripper_clear() -> None:
    assert not success(STACK, stack_scene(tcp=(0.5, 0.0, layer(1) + 0.04)))
    assert success(STACK, stack_scene(tcp=(0.5, 0.0, layer(1) + 0.07)))
    assert not success(STACK, stack_scene(robot=("blue",)))


@pytest.mark.parametrize("side", SIDES)
def test_place_next_to_each_side(side: str) -> None:
    ax, ay = SIDE_VECTORS[side]
    scene = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.5 + 0.07 * ax, 0.07 * ay, HALF)})
    for other in SIDES:
        assert next_to(scene, "blue", "red", other) is (other == side)
        assert success(Instruction("place", ("blue", "red"), other), scene) is (other == side)


def test_place_directions_follow_the_camera_convention() -> None:
    scene = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.5, -0.07, HALF)})
    assert success(parse("place the blue block to the left of the red block"), scene)
    behind = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.43, 0.0, HALF)})
    assert success(parse("place the blue block behind the red block"), behind)


def test_place_fails_when_too_far_skewed_or_held() -> None:
    far = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.5, 0.15, HALF)})
    assert not next_to(far, "blue", "red", "right of")
    skew = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.54, 0.07, HALF)})
    assert not next_to(skew, "blue", "red", "right of")
    place = Instruction("place", ("blue", "red"), "right of")
    held = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.5, 0.07, HALF + 0.01)}, held=("blue",))
    assert not success(place, held)
    gripping = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.5, 0.07, HALF)}, held=("blue",))
    assert evaluate(place, gripping)["next_to"]
    assert not success(place, gripping)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_push_each_direction(direction: str) -> None:
    ux, uy = DIRECTION_VECTORS[direction]
    start = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.55, 0.1, HALF)})
    end = make_scene({"red": (0.5 + 0.1 * ux, 0.1 * uy, HALF), "blue": (0.55, 0.1, HALF)})
    for other in DIRECTIONS:
        assert pushed(end, start, "red", other) is (other == direction)
        assert success(Instruction("push", ("red",), other), end, start) is (other == direction)


def test_push_needs_start_and_a_block_kept_down() -> None:
    start = make_scene({"red": (0.5, 0.0, HALF)})
    end = make_scene({"red": (0.5, 0.1, HALF)})
    with pytest.raises(ValueError, match="start scene"):
        success(Instruction("push", ("red",), "right"), end)
    assert success(parse("push the red block to the right"), end, start)
    lifted_end = make_scene({"red": (0.5, 0.1, 0.2)})
    assert not success(Instruction("push", ("red",), "right"), lifted_end, start)
    short = make_scene({"red": (0.5, 0.05, HALF)})
    assert not success(Instruction("push", ("red",), "right"), short, start)


def test_reach() -> None:
    block = {"red": (0.5, 0.0, HALF)}
    reach = parse("move the gripper above the red block")
    assert success(reach, make_scene(block, tcp=(0.5, 0.0, BLOCK_SIZE + 0.05)))
    assert success(reach, make_scene(block, tcp=(0.51, 0.0, BLOCK_SIZE + 0.05)))
    assert not success(reach, make_scene(block, tcp=(0.5, 0.0, BLOCK_SIZE + 0.2)))
    assert not success(reach, make_scene(block, tcp=(0.5, 0.05, BLOCK_SIZE + 0.05)))
    assert not reached(make_scene(block, tcp=(0.5, 0.0, HALF)), "red")


def test_unstack() -> None:
    unstack = Instruction("unstack", ("blue", "red"))
    assert not success(unstack, stack_scene())
    beside = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.5, 0.1, HALF)})
    assert evaluate(unstack, beside) == {
        "off": True,
        "on_table": True,
        "apart": True,
        "at_rest": True,
        "gripper_clear": True,
        "success": True,
    }
    held = make_scene({"red": (0.5, 0.0, HALF), "blue": (0.5, 0.1, 0.2)}, held=("blue",))
    assert not success(unstack, held)


def test_unknown_colour_names_scene_colours() -> None:
    scene = stack_scene()
    with pytest.raises(ValueError, match="'green'.*red, blue"):
        scene.index("green")
    with pytest.raises(ValueError, match="red, blue"):
        success(Instruction("lift", ("green",)), scene)


def test_a_tower_naming_a_colour_the_scene_lacks_fails_naming_the_first_missing_one() -> None:
    """Success stops at the first condition that fails, but a colour the scene lacks is an error
    in any position, not a tower that happens not to stand."""
    scene = make_scene({"red": (0.5, 0.0, layer(0)), "green": (0.6, 0.1, layer(0))})
    for colours in (("green", "yellow", "red"), ("red", "green", "yellow", "purple")):
        tower = Instruction("tower", colours)
        for judge in (success, evaluate, dense_reward):
            with pytest.raises(ValueError, match="no 'yellow' block.*red, green"):
                judge(tower, scene)


def test_evaluate_success_matches_all_flags() -> None:
    scene = stack_scene(0.02)
    for instruction in (STACK, Instruction("reach", ("red",)), Instruction("lift", ("blue",))):
        flags = evaluate(instruction, scene)
        assert flags["success"] == all(v for k, v in flags.items() if k != "success")
        assert all(type(v) is bool for v in flags.values())


@pytest.mark.benchmark
def test_judging_a_tower_costs_a_small_share_of_a_physics_step() -> None:
    scene = make_scene(
        {"red": (0.5, 0.0, layer(0)), "green": (0.5, 0.0, layer(1)), "blue": (0.5, 0.0, layer(2))}
    )
    assert success(TOWER, scene)
    share = share_of_physics_step(lambda: success(TOWER, scene))
    print(
        f"\noracle.success on a tower: {share:.3f} of a raw physics step "
        f"(target <= {MAX_SHARE_OF_PHYSICS_STEP})"
    )
    assert share <= MAX_SHARE_OF_PHYSICS_STEP
