"""Dense staged rewards on hand-built scenes: exactly 1.0 on success, in [0, 1), rising."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from timing import MAX_SHARE_OF_PHYSICS_STEP, share_of_physics_step

from gameon.envs.language import COLOURS, SKILLS, Instruction, all_instructions
from gameon.envs.oracle import BLOCK_SIZE, LIFT_HEIGHT, SceneState, success
from gameon.envs.rewards import GRIPPER_WIDTH, STAGES, dense_reward, levels_done

HALF = BLOCK_SIZE / 2
FAR_TCP = (0.3, 0.0, 0.4)


def layer(k: int) -> float:
    """Centre height of an upright block k layers above the table."""
    return HALF + k * BLOCK_SIZE


def make_scene(
    blocks: dict[str, tuple[float, float, float]],
    *,
    held: tuple[str, ...] = (),
    tcp: tuple[float, float, float] = FAR_TCP,
    opening: float | None = None,
    linvel: dict[str, tuple[float, float, float]] | None = None,
) -> SceneState:
    """Upright, unrotated blocks whose table and block contacts follow from their boxes."""
    colours = tuple(blocks)
    pos = np.array([blocks[c] for c in colours], dtype=float)
    contacts = np.zeros((len(colours), len(colours)), bool)
    for i, j in itertools.permutations(range(len(colours)), 2):
        overlap = bool(np.all(np.abs(pos[i, :2] - pos[j, :2]) < BLOCK_SIZE))
        contacts[i, j] = overlap and abs(abs(pos[i, 2] - pos[j, 2]) - BLOCK_SIZE) <= 1e-3
    fingers = np.array([c in held for c in colours])
    linvel = linvel or {}
    return SceneState(
        colours=colours,
        block_pos=pos,
        block_quat=np.tile([1.0, 0.0, 0.0, 0.0], (len(colours), 1)),
        block_linvel=np.array([linvel.get(c, (0.0, 0.0, 0.0)) for c in colours], dtype=float),
        block_angvel=np.zeros((len(colours), 3)),
        tcp_pos=np.array(tcp, dtype=float),
        gripper_opening=(BLOCK_SIZE if held else GRIPPER_WIDTH) if opening is None else opening,
        touches_table=np.abs(pos[:, 2] - HALF) <= 1e-3,
        touches_left_finger=fingers.copy(),
        touches_right_finger=fingers.copy(),
        touches_robot=fingers.copy(),
        block_contacts=contacts,
    )


RED, GREEN, BLUE = (0.5, 0.0, layer(0)), (0.6, -0.1, layer(0)), (0.5, 0.15, layer(0))
HIGH = layer(0) + LIFT_HEIGHT + 0.02
TOWER = Instruction("tower", ("red", "green", "blue"))
PUSH = Instruction("push", ("red",), "right")
PUSH_START = make_scene({"red": RED})


def assert_rising(instruction: Instruction, scenes: list[SceneState], start=None) -> None:
    rewards = [dense_reward(instruction, scene, start) for scene in scenes]
    assert all(0.0 <= r <= 1.0 for r in rewards), rewards
    assert all(a < b for a, b in itertools.pairwise(rewards)), rewards
    assert rewards[-1] == 1.0
    assert all(not success(instruction, s, start) for s in scenes[:-1])


def test_stages_cover_every_skill() -> None:
    assert set(STAGES) == set(SKILLS)
    assert all(STAGES[skill] and all(STAGES[skill]) for skill in SKILLS)


SUCCESSES = [
    (Instruction("reach", ("red",)), make_scene({"red": RED}, tcp=(0.5, 0.0, 0.1)), None),
    (
        Instruction("lift", ("red",)),
        make_scene({"red": (0.5, 0.0, HIGH)}, held=("red",), tcp=(0.5, 0.0, HIGH)),
        None,
    ),
    (PUSH, make_scene({"red": (0.5, 0.1, HALF)}), PUSH_START),
    (
        Instruction("place", ("blue", "red"), "right of"),
        make_scene({"red": RED, "blue": (0.5, 0.07, HALF)}),
        None,
    ),
    (
        Instruction("stack", ("blue", "red")),
        make_scene({"red": RED, "blue": (0.5, 0, layer(1))}),
        None,
    ),
    (Instruction("unstack", ("blue", "red")), make_scene({"red": RED, "blue": BLUE}), None),
    (
        TOWER,
        make_scene(
            {"red": RED, "green": (0.5, 0.0, layer(1)), "blue": (0.5, 0.0, layer(2))},
        ),
        None,
    ),
]


@pytest.mark.parametrize(("instruction", "scene", "start"), SUCCESSES)
def test_success_scores_exactly_one(instruction, scene, start) -> None:
    assert success(instruction, scene, start)
    assert dense_reward(instruction, scene, start) == 1.0


NEAR_MISSES = [
    (Instruction("reach", ("red",)), make_scene({"red": RED}, tcp=(0.5, 0.05, 0.1)), None),
    (
        Instruction("lift", ("red",)),
        make_scene({"red": (0.5, 0.0, 0.06)}, held=("red",), tcp=(0.5, 0.0, 0.06)),
        None,
    ),
    (PUSH, make_scene({"red": (0.5, 0.05, HALF)}, tcp=(0.5, 0.005, HALF)), PUSH_START),
    (
        Instruction("place", ("blue", "red"), "right of"),
        make_scene({"red": RED, "blue": (0.5, 0.07, HALF)}, held=("blue",), tcp=(0.5, 0.07, HALF)),
        None,
    ),
    (
        Instruction("stack", ("blue", "red")),
        make_scene({"red": RED, "blue": (0.5, 0, layer(1))}, linvel={"blue": (0.1, 0.0, 0.0)}),
        None,
    ),
    (
        Instruction("unstack", ("blue", "red")),
        make_scene({"red": RED, "blue": BLUE}, held=("blue",), tcp=BLUE),
        None,
    ),
    (
        TOWER,
        make_scene(
            {"red": RED, "green": (0.5, 0.0, layer(1)), "blue": (0.5, 0.0, layer(2))},
            tcp=(0.5, 0.0, layer(2)),
        ),
        None,
    ),
]


@pytest.mark.parametrize(("instruction", "scene", "start"), NEAR_MISSES)
def test_near_misses_score_below_one(instruction, scene, start) -> None:
    assert not success(instruction, scene, start)
    assert 0.5 <= dense_reward(instruction, scene, start) < 1.0


def test_reach_rises_as_the_tcp_closes_in() -> None:
    path = [(0.3, 0.2, 0.4), (0.4, 0.1, 0.3), (0.45, 0.05, 0.2), (0.5, 0.03, 0.15), (0.5, 0, 0.1)]
    reach = Instruction("reach", ("red",))
    assert_rising(reach, [make_scene({"red": RED}, tcp=tcp) for tcp in path])


def test_lift_rises_through_reach_grasp_and_lift() -> None:
    lift = Instruction("lift", ("red",))
    scenes = [
        make_scene({"red": RED}),
        make_scene({"red": RED}, tcp=(0.5, 0.0, 0.1)),
        make_scene({"red": RED}, tcp=(0.5, 0.0, layer(0) + 0.01)),
        make_scene({"red": RED}, tcp=(0.5, 0.0, layer(0)), opening=0.06),
        make_scene({"red": RED}, held=("red",), tcp=(0.5, 0.0, layer(0))),
        make_scene({"red": (0.5, 0, 0.06)}, held=("red",), tcp=(0.5, 0, 0.06)),
        make_scene({"red": (0.5, 0, HIGH)}, held=("red",), tcp=(0.5, 0, HIGH)),
    ]
    assert_rising(lift, scenes)


def test_a_fingertip_press_from_above_earns_no_lift_reward() -> None:
    """Both fingertips on the block's top edges count as `grasped` but are not a grasp."""
    lift = Instruction("lift", ("red",))
    pressed = make_scene(
        {"red": RED}, held=("red",), tcp=(0.5, 0.0, layer(0) + 0.039), opening=0.04
    )
    around = make_scene({"red": RED}, tcp=(0.5, 0.0, layer(0) + 0.01))
    in_hand = make_scene({"red": RED}, held=("red",), tcp=(0.5, 0.0, layer(0)))
    assert dense_reward(lift, pressed) < 1 / len(STAGES["lift"])
    assert dense_reward(lift, pressed) < dense_reward(lift, around) < dense_reward(lift, in_hand)


def test_the_grasp_stage_spans_the_block_height_under_an_open_hand() -> None:
    """A TCP pushed down to the table beside the centre is still where closing would pinch."""
    lift = Instruction("lift", ("red",))
    above = make_scene({"red": RED}, tcp=(0.5, 0.0, layer(0) + 0.03))
    low = make_scene({"red": RED}, tcp=(0.5, 0.015, 0.007))
    beside = make_scene({"red": RED}, tcp=(0.5, 0.03, 0.007))
    assert dense_reward(lift, above) < 1 / 3 <= dense_reward(lift, low)
    assert dense_reward(lift, beside) < 1 / 3


def test_approaching_with_an_open_hand_pays_more_than_with_a_closed_one() -> None:
    lift = Instruction("lift", ("red",))
    tcp = (0.5, 0.0, 0.15)
    rewards = [
        dense_reward(lift, make_scene({"red": RED}, tcp=tcp, opening=opening))
        for opening in (BLOCK_SIZE, 0.065, GRIPPER_WIDTH)
    ]
    assert rewards[0] < rewards[1] < rewards[2]


def stack_path(
    source: tuple[float, float, float], base: tuple[float, float, float]
) -> list[tuple[tuple, bool, tuple]]:
    """(block centre, held, TCP) of a block moved from `source` on the table onto `base`.

    Far, TCP above it, grasped, lifted, above the base, seated and held, released, gripper clear.
    """
    sx, sy, _ = source
    bx, by, bz = base
    lift = bz + HALF + LIFT_HEIGHT + 0.05
    seat = bz + BLOCK_SIZE
    return [
        (source, False, FAR_TCP),
        (source, False, (sx, sy, 0.1)),
        (source, True, source),
        ((sx, sy, lift), True, (sx, sy, lift)),
        ((bx, by, lift), True, (bx, by, lift)),
        ((bx, by, seat), True, (bx, by, seat)),
        ((bx, by, seat), False, (bx, by, seat)),
        ((bx, by, seat), False, (bx, by, seat + 0.1)),
    ]


def test_stack_rises_from_far_to_released() -> None:
    stack = Instruction("stack", ("blue", "red"))
    scenes = [
        make_scene({"red": RED, "blue": pos}, held=("blue",) * held, tcp=tcp)
        for pos, held, tcp in stack_path(BLUE, RED)
    ]
    assert_rising(stack, scenes)


def test_push_rises_from_approach_to_clear() -> None:
    blocks = lambda y: {"red": (0.5, y, HALF)}  # noqa: E731
    scenes = [
        make_scene(blocks(0.0)),
        make_scene(blocks(0.0), tcp=(0.5, -0.05, 0.1)),
        make_scene(blocks(0.0), tcp=(0.5, -0.05, HALF)),
        make_scene(blocks(0.04), tcp=(0.5, 0.0, HALF)),
        make_scene(blocks(0.085), tcp=(0.5, 0.045, HALF)),
        make_scene(blocks(0.085), tcp=(0.5, 0.0, 0.1)),
    ]
    assert_rising(PUSH, scenes, PUSH_START)


def test_push_drift_costs_reward() -> None:
    straight = make_scene({"red": (0.5, 0.04, HALF)}, tcp=(0.5, 0.0, HALF))
    skewed = make_scene({"red": (0.54, 0.04, HALF)}, tcp=(0.54, 0.0, HALF))
    assert dense_reward(PUSH, skewed, PUSH_START) < dense_reward(PUSH, straight, PUSH_START)


def test_push_without_start_raises() -> None:
    with pytest.raises(ValueError, match="start"):
        dense_reward(PUSH, PUSH_START)


def test_place_rises_from_far_to_released() -> None:
    place = Instruction("place", ("blue", "red"), "left of")
    spot = (0.5, -0.07)
    steps = [
        ({"blue": BLUE}, (), FAR_TCP),
        ({"blue": BLUE}, ("blue",), BLUE),
        ({"blue": (0.5, 0.15, 0.15)}, ("blue",), (0.5, 0.15, 0.15)),
        ({"blue": (0.55, -0.04, 0.15)}, ("blue",), (0.55, -0.04, 0.15)),
        ({"blue": (*spot, 0.15)}, ("blue",), (*spot, 0.15)),
        ({"blue": (*spot, HALF)}, ("blue",), (*spot, HALF)),
        ({"blue": (*spot, HALF)}, (), (*spot, HALF + 0.03)),
        ({"blue": (*spot, HALF)}, (), (*spot, 0.15)),
    ]
    scenes = [make_scene({"red": RED, **b}, held=h, tcp=t) for b, h, t in steps]
    assert_rising(place, scenes)


def test_unstack_rises_from_far_to_released() -> None:
    unstack = Instruction("unstack", ("blue", "red"))
    top = (0.5, 0.0, layer(1))
    steps = [
        ({"blue": top}, (), FAR_TCP),
        ({"blue": top}, ("blue",), top),
        ({"blue": (0.5, 0.0, 0.16)}, ("blue",), (0.5, 0.0, 0.16)),
        ({"blue": (0.5, 0.05, 0.16)}, ("blue",), (0.5, 0.05, 0.16)),
        ({"blue": (0.5, 0.1, 0.16)}, ("blue",), (0.5, 0.1, 0.16)),
        ({"blue": (0.5, 0.1, HALF)}, ("blue",), (0.5, 0.1, HALF)),
        ({"blue": (0.5, 0.1, HALF)}, (), (0.5, 0.1, 0.07)),
        ({"blue": (0.5, 0.1, HALF)}, (), (0.5, 0.1, 0.15)),
    ]
    scenes = [make_scene({"red": RED, **b}, held=h, tcp=t) for b, h, t in steps]
    assert_rising(unstack, scenes)


def test_tower_counts_levels_and_rises() -> None:
    """A level counts once its block sits on the one below; letting go matters for the top only."""
    green_on_red = (0.5, 0.0, layer(1))
    levels = [
        ({"red": (0.5, 0.0, 0.15), "green": GREEN, "blue": BLUE}, 0, 0),
        ({"red": RED, "green": GREEN, "blue": BLUE}, 1, 1),
        ({"red": RED, "green": green_on_red, "blue": BLUE}, 2, 2),
        ({"red": RED, "green": green_on_red, "blue": (0.5, 0.0, layer(2))}, 3, 2),
    ]
    for blocks, done, share in levels:
        scene = make_scene(blocks, tcp=(0.5, 0.0, layer(2)))
        assert levels_done(scene, TOWER.objects) == done
        assert share / 3 <= dense_reward(TOWER, scene) < (share + 1) / 3

    scenes = [
        make_scene({"red": RED, "green": pos, "blue": BLUE}, held=("green",) * held, tcp=tcp)
        for pos, held, tcp in stack_path(GREEN, RED)[:-1]
    ]
    scenes += [
        make_scene({"red": RED, "green": green_on_red, "blue": pos}, held=("blue",) * held, tcp=tcp)
        for pos, held, tcp in stack_path(BLUE, green_on_red)[1:]
    ]
    assert_rising(TOWER, scenes)


SCENE_COLOURS = COLOURS[:4]
INSTRUCTIONS = all_instructions(SCENE_COLOURS)
coordinate = st.floats(-0.3, 0.8, allow_nan=False)
speed = st.floats(-1.0, 1.0, allow_nan=False)
flags = st.lists(st.booleans(), min_size=len(SCENE_COLOURS), max_size=len(SCENE_COLOURS))


@st.composite
def scenes(draw: st.DrawFn) -> SceneState:
    n = len(SCENE_COLOURS)
    vectors = lambda k: np.array(draw(st.lists(coordinate, min_size=k, max_size=k)))  # noqa: E731
    quat = vectors(4 * n).reshape(n, 4) + np.array([1.0, 0.0, 0.0, 0.0])
    contacts = np.array(draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n)))
    return SceneState(
        colours=SCENE_COLOURS,
        block_pos=vectors(3 * n).reshape(n, 3),
        block_quat=quat,
        block_linvel=np.array(draw(st.lists(speed, min_size=3 * n, max_size=3 * n))).reshape(n, 3),
        block_angvel=np.array(draw(st.lists(speed, min_size=3 * n, max_size=3 * n))).reshape(n, 3),
        tcp_pos=vectors(3),
        gripper_opening=draw(st.floats(0.0, GRIPPER_WIDTH)),
        touches_table=np.array(draw(flags)),
        touches_left_finger=np.array(draw(flags)),
        touches_right_finger=np.array(draw(flags)),
        touches_robot=np.array(draw(flags)),
        block_contacts=contacts.reshape(n, n),
    )


@settings(max_examples=200, deadline=None)
@given(scenes(), scenes(), st.sampled_from(INSTRUCTIONS))
def test_reward_is_bounded_and_one_only_on_success(scene, start, instruction) -> None:
    reward = dense_reward(instruction, scene, start)
    assert math.isfinite(reward)
    assert 0.0 <= reward <= 1.0
    assert (reward == 1.0) is success(instruction, scene, start)
    assert dense_reward(instruction, scene, start) == reward


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(SUCCESSES),
    st.lists(st.floats(-0.015, 0.015), min_size=3, max_size=3),
    st.floats(0.0, 0.05),
    st.booleans(),
)
def test_jittered_successes_score_one_only_when_still_successes(case, shift, speed, held) -> None:
    instruction, scene, start = case
    blocks = {c: tuple(p + shift) for c, p in zip(scene.colours, scene.block_pos, strict=True)}
    jittered = make_scene(
        blocks,
        tcp=tuple(scene.tcp_pos),
        held=scene.colours[-1:] * held,
        linvel={scene.colours[-1]: (speed, 0.0, 0.0)},
    )
    reward = dense_reward(instruction, jittered, start)
    assert 0.0 <= reward <= 1.0
    assert (reward == 1.0) is success(instruction, jittered, start)


@pytest.mark.benchmark
def test_tower_reward_costs_a_small_share_of_a_physics_step() -> None:
    scene = make_scene(
        {"red": RED, "green": (0.5, 0.0, layer(1)), "blue": (0.5, 0.0, layer(2))},
        tcp=(0.5, 0.0, layer(2)),
    )
    assert dense_reward(TOWER, scene) < 1.0
    share = share_of_physics_step(lambda: dense_reward(TOWER, scene))
    print(
        f"\ndense_reward on a tower in progress: {share:.3f} of a raw physics step "
        f"(target <= {MAX_SHARE_OF_PHYSICS_STEP})"
    )
    assert share <= MAX_SHARE_OF_PHYSICS_STEP
