"""Tests for the block-stacking instruction grammar in gameon.envs.language."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gameon.envs.language import (
    COLOURS,
    DIRECTIONS,
    GOAL_SIZE,
    MAX_TOWER,
    SIDES,
    SKILLS,
    Instruction,
    all_instructions,
    canonical_templates,
    decode,
    encode,
    parse,
    required_blocks,
    sample,
)

ALL = all_instructions(COLOURS)


def test_constants_and_goal_size() -> None:
    assert len(SKILLS) + MAX_TOWER * len(COLOURS) + len(DIRECTIONS) + len(SIDES) == GOAL_SIZE
    assert set(canonical_templates()) == set(SKILLS)
    assert [required_blocks(s) for s in SKILLS] == [1, 1, 1, 2, 2, 2, 3]


def test_all_instructions_count_and_order() -> None:
    towers = 5 * 4 * 3 + 5 * 4 * 3 * 2 + 5 * 4 * 3 * 2 * 1
    assert len(ALL) == 5 + 5 + 5 * 4 + 20 * 4 + 20 + 20 + towers
    assert len(set(ALL)) == len(ALL)
    assert all_instructions(COLOURS) == ALL
    assert all_instructions(("red", "blue"), ["tower"]) == []


def test_canonical_round_trip() -> None:
    for instruction in ALL:
        text = str(instruction)
        assert str(parse(text)) == text
        assert parse(text) == instruction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("move the gripper above the red block", Instruction("reach", ("red",))),
        ("pick up the red block", Instruction("lift", ("red",))),
        ("push the red block to the left", Instruction("push", ("red",), "left")),
        ("push the red block to the right", Instruction("push", ("red",), "right")),
        ("push the red block forward", Instruction("push", ("red",), "forward")),
        ("push the red block backward", Instruction("push", ("red",), "backward")),
        (
            "place the red block to the left of the blue block",
            Instruction("place", ("red", "blue"), "left of"),
        ),
        (
            "place the red block to the right of the blue block",
            Instruction("place", ("red", "blue"), "right of"),
        ),
        (
            "place the red block in front of the blue block",
            Instruction("place", ("red", "blue"), "in front of"),
        ),
        (
            "place the red block behind the blue block",
            Instruction("place", ("red", "blue"), "behind"),
        ),
        ("stack the red block on the blue block", Instruction("stack", ("red", "blue"))),
        ("unstack the red block from the blue block", Instruction("unstack", ("red", "blue"))),
        (
            "build a tower of red, green and blue from the bottom up",
            Instruction("tower", ("red", "green", "blue")),
        ),
        (
            "build a tower of red, green, blue and yellow from the bottom up",
            Instruction("tower", ("red", "green", "blue", "yellow")),
        ),
    ],
)
def test_canonical_examples(text: str, expected: Instruction) -> None:
    assert parse(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("reach the red block", Instruction("reach", ("red",))),
        ("reach above the red block", Instruction("reach", ("red",))),
        ("move above the red block", Instruction("reach", ("red",))),
        ("reach red", Instruction("reach", ("red",))),
        ("lift the red block", Instruction("lift", ("red",))),
        ("pick the red block up", Instruction("lift", ("red",))),
        ("grasp and lift the red block", Instruction("lift", ("red",))),
        ("pick up red", Instruction("lift", ("red",))),
        ("push the red block left", Instruction("push", ("red",), "left")),
        ("push red right", Instruction("push", ("red",), "right")),
        ("slide the red block to the left", Instruction("push", ("red",), "left")),
        ("slide the red block forward", Instruction("push", ("red",), "forward")),
        (
            "put the red block to the left of the blue block",
            Instruction("place", ("red", "blue"), "left of"),
        ),
        ("place red behind blue", Instruction("place", ("red", "blue"), "behind")),
        ("put the red block on the blue block", Instruction("stack", ("red", "blue"))),
        ("place the red block on top of the blue block", Instruction("stack", ("red", "blue"))),
        ("put the red block on top of the blue block", Instruction("stack", ("red", "blue"))),
        ("stack red on blue", Instruction("stack", ("red", "blue"))),
        ("take the red block off the blue block", Instruction("unstack", ("red", "blue"))),
        ("remove the red block from the blue block", Instruction("unstack", ("red", "blue"))),
        ("unstack red from the blue block", Instruction("unstack", ("red", "blue"))),
        ("build a tower of red, green, blue", Instruction("tower", ("red", "green", "blue"))),
        (
            "build a tower of red, green, blue from the bottom up",
            Instruction("tower", ("red", "green", "blue")),
        ),
        (
            "build a tower with red, green and blue",
            Instruction("tower", ("red", "green", "blue")),
        ),
        (
            "build a tower of the red block, the green block and the blue block",
            Instruction("tower", ("red", "green", "blue")),
        ),
        (
            "build a tower of red,green , blue,yellow and purple",
            Instruction("tower", COLOURS),
        ),
    ],
)
def test_paraphrases(text: str, expected: Instruction) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "  Stack the RED block on the Blue Block.  ",
        "stack   the red\tblock on the blue block.",
        "STACK RED ON BLUE",
    ],
)
def test_case_whitespace_and_period(text: str) -> None:
    assert parse(text) == Instruction("stack", ("red", "blue"))


@given(
    st.sampled_from(ALL),
    st.lists(st.sampled_from([" ", "  ", "\t"]), min_size=2, max_size=2),
    st.booleans(),
    st.booleans(),
)
def test_parse_tolerates_noise(
    instruction: Instruction, pads: list[str], upper: bool, period: bool
) -> None:
    text = str(instruction).replace(" ", "  ")
    text = pads[0] + (text.upper() if upper else text) + ("." if period else "") + pads[1]
    assert parse(text) == instruction


def test_encode_shape_dtype_and_round_trip() -> None:
    encodings = set()
    for instruction in ALL:
        goal = encode(instruction)
        assert goal.shape == (GOAL_SIZE,)
        assert goal.dtype == np.float32
        assert decode(goal) == instruction
        encodings.add(goal.tobytes())
    assert len(encodings) == len(ALL)


@given(st.sampled_from(ALL))
def test_encode_round_trip_property(instruction: Instruction) -> None:
    assert decode(encode(instruction)) == instruction
    assert decode(encode(instruction).astype(np.float64)) == instruction


def test_decode_rejects_invalid_vectors() -> None:
    good = encode(Instruction("stack", ("red", "blue")))
    with pytest.raises(ValueError, match="shape"):
        decode(good[:-1])
    with pytest.raises(ValueError, match="0 or 1"):
        decode(good * 0.5)
    with pytest.raises(ValueError, match="no skill"):
        decode(np.zeros(GOAL_SIZE, dtype=np.float32))
    two_skills = good.copy()
    two_skills[0] = 1.0
    with pytest.raises(ValueError, match="skill"):
        decode(two_skills)
    gap = good.copy()
    gap[len(SKILLS) : len(SKILLS) + len(COLOURS)] = 0.0
    with pytest.raises(ValueError, match="leading run"):
        decode(gap)
    with_direction = good.copy()
    with_direction[-len(SIDES) - len(DIRECTIONS)] = 1.0
    with pytest.raises(ValueError, match="takes no relation"):
        decode(with_direction)
    too_few = encode(Instruction("tower", ("red", "green", "blue")))
    too_few[len(SKILLS) + 2 * len(COLOURS) : len(SKILLS) + 3 * len(COLOURS)] = 0.0
    with pytest.raises(ValueError, match="3 to 5"):
        decode(too_few)


def test_error_unknown_text_lists_templates() -> None:
    with pytest.raises(ValueError) as info:
        parse("dance with the red block")
    message = str(info.value)
    assert "'dance with the red block'" in message
    for template in canonical_templates().values():
        assert template in message
    assert "accepted colours: red, green, blue, yellow, purple" in message
    assert "<colour>" in message


def test_error_unknown_text_is_one_form_a_line() -> None:
    with pytest.raises(ValueError) as info:
        parse("dance with the red block")
    lines = str(info.value).splitlines()
    assert lines[0] == "cannot parse instruction 'dance with the red block'; accepted forms:"
    forms = [f"  {skill}: {template}" for skill, template in canonical_templates().items()]
    assert lines[1 : 1 + len(forms)] == forms
    assert lines[1 + len(forms) :] == [
        "accepted colours: red, green, blue, yellow, purple",
        "accepted directions: to the left, to the right, forward, backward",
        "accepted sides: to the left of, to the right of, in front of, behind",
    ]


def test_an_unreadable_tower_says_it_cannot_parse_once() -> None:
    with pytest.raises(ValueError) as info:
        parse("build a tower of red green blue")
    message = str(info.value)
    assert message.splitlines()[0] == (
        "cannot parse instruction 'build a tower of red green blue'; accepted forms:"
    )
    assert message.count("cannot parse") == 1


def test_error_unknown_colour() -> None:
    expected = "unknown colour 'pink'; accepted colours: red, green, blue, yellow, purple"
    with pytest.raises(ValueError, match=re.escape(expected)) as info:
        parse("pick up the pink block")
    assert "'pick up the pink block'" in str(info.value)
    with pytest.raises(ValueError, match=re.escape(expected)):
        parse("build a tower of red, pink and blue")
    with pytest.raises(ValueError, match=re.escape(expected)):
        Instruction("lift", ("pink",))


def test_error_same_block_twice() -> None:
    with pytest.raises(ValueError, match="more than once") as info:
        parse("stack the red block on the red block")
    assert "'stack the red block on the red block'" in str(info.value)
    with pytest.raises(ValueError, match="more than once"):
        parse("build a tower of red, green and red")


def test_error_tower_size() -> None:
    with pytest.raises(ValueError, match="tower needs 3 to 5 blocks, got 2"):
        parse("build a tower of red and blue")
    with pytest.raises(ValueError, match="tower needs 3 to 5 blocks, got 2"):
        Instruction("tower", ("red", "blue"))


def test_error_unknown_push_direction() -> None:
    expected = "unknown push direction 'up'; accepted directions: left, right, forward, backward"
    with pytest.raises(ValueError, match=re.escape(expected)):
        parse("push the red block up")


def test_error_unknown_place_side() -> None:
    with pytest.raises(ValueError, match="accepted sides: to the left of") as info:
        parse("place the red block above the blue block")
    assert "place the <colour> block <side> the <colour> block" in str(info.value)
    with pytest.raises(ValueError, match=re.escape("accepted sides: left of, right of")):
        Instruction("place", ("red", "blue"), "above")


def test_instruction_validation() -> None:
    with pytest.raises(ValueError, match="accepted skills: reach, lift"):
        Instruction("fly", ("red",))
    with pytest.raises(ValueError, match="stack needs 2 block"):
        Instruction("stack", ("red",))
    with pytest.raises(ValueError, match="takes no relation"):
        Instruction("lift", ("red",), "left")
    with pytest.raises(ValueError, match="push direction None"):
        Instruction("push", ("red",))
    assert Instruction("lift", ["red"]).objects == ("red",)  # type: ignore[arg-type]


@pytest.mark.parametrize("objects", ["red", None])
def test_objects_that_are_not_a_tuple_of_colours_say_so(objects: object) -> None:
    """A single colour given as text was read letter by letter: "unknown colour 'r'"."""
    with pytest.raises(ValueError) as info:
        Instruction("lift", objects)  # type: ignore[arg-type]
    assert str(info.value) == (
        f"objects must be a tuple of colours, e.g. ('red',) or ('red', 'blue'), got {objects!r}"
    )


@pytest.mark.parametrize("skill", SKILLS)
def test_sample_deterministic_and_in_scene(skill: str) -> None:
    scene = ("blue", "purple", "red", "yellow")
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    draws_a = [sample(skill, scene, rng_a) for _ in range(50)]
    draws_b = [sample(skill, scene, rng_b) for _ in range(50)]
    assert draws_a == draws_b
    for instruction in draws_a:
        assert instruction.skill == skill
        assert set(instruction.objects) <= set(scene)
    if skill == "tower":
        assert all(len(i.objects) == len(scene) for i in draws_a)


@pytest.mark.parametrize("skill", SKILLS)
def test_sample_covers_all_options(skill: str) -> None:
    scene = ("green", "yellow", "red")
    rng = np.random.default_rng(0)
    seen = {sample(skill, scene, rng) for _ in range(1000)}
    assert seen == set(all_instructions(scene, [skill]))


def test_sample_tower_size() -> None:
    rng = np.random.default_rng(1)
    seen = {sample("tower", COLOURS, rng, n_tower=3) for _ in range(2000)}
    assert seen == {i for i in ALL if i.skill == "tower" and len(i.objects) == 3}
    with pytest.raises(ValueError, match="n_tower"):
        sample("tower", ("red", "green", "blue"), rng, n_tower=4)
    with pytest.raises(ValueError, match="n_tower"):
        sample("lift", ("red", "green", "blue"), rng, n_tower=3)


def test_sample_too_few_blocks() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="stack needs at least 2 blocks"):
        sample("stack", ("red",), rng)
    with pytest.raises(ValueError, match="tower needs at least 3 blocks"):
        sample("tower", ("red", "green"), rng)
    with pytest.raises(ValueError, match="unknown colour 'pink'"):
        sample("lift", ("pink", "red"), rng)
    with pytest.raises(ValueError, match="unknown skill"):
        sample("fly", ("red",), rng)


def test_a_push_without_a_direction_says_so() -> None:
    with pytest.raises(ValueError) as info:
        parse("push the red block")
    assert str(info.value) == (
        "cannot parse instruction 'push the red block': a push needs a direction; "
        "accepted directions: to the left, to the right, forward, backward"
    )


@pytest.mark.parametrize("text", [None, 3, b"pick up the red block", ["pick up the red block"]])
def test_parse_of_anything_but_text_says_it_needs_text(text: object) -> None:
    with pytest.raises(TypeError, match=r"^an instruction to parse must be text \(str\), got "):
        parse(text)  # type: ignore[arg-type]
