"""Instruction grammar for language-goal block stacking: parse, print, encode, decode and sample.

Every instruction has one canonical text (see `canonical_templates`), and `str(parse(t)) == t`
for every canonical text. `parse` is case-insensitive, ignores surrounding and repeated
whitespace and a trailing period, and also accepts these paraphrases:

- reach: "reach the red block", "reach above the red block", "move above the red block"
- lift: "lift the red block", "pick the red block up", "grasp and lift the red block"
- push: "push the red block left" (without "to the"), "slide the red block to the left"
- place: "put the red block to the left of the blue block" (put = place)
- stack: "put the red block on the blue block", "place the red block on top of the blue block",
  "put the red block on top of the blue block", "stack red on blue"
- unstack: "take the red block off the blue block", "remove the red block from the blue block"
- tower: "build a tower of red, green, blue" (comma list without "and", with or without
  "from the bottom up"), "build a tower with red, green and blue"

Wherever a block is named, "the red block" and the bare colour "red" are interchangeable.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

SKILLS = ("reach", "lift", "push", "place", "stack", "unstack", "tower")
COLOURS = ("red", "green", "blue", "yellow", "purple")
DIRECTIONS = ("left", "right", "forward", "backward")
SIDES = ("left of", "right of", "in front of", "behind")
MAX_TOWER = 5
GOAL_SIZE: int = len(SKILLS) + MAX_TOWER * len(COLOURS) + len(DIRECTIONS) + len(SIDES)

_REQUIRED = {"reach": 1, "lift": 1, "push": 1, "place": 2, "stack": 2, "unstack": 2, "tower": 3}
_DIRECTION_TEXT = {d: f"to the {d}" if d in ("left", "right") else d for d in DIRECTIONS}
_SIDE_TEXT = {s: f"to the {s}" if s in ("left of", "right of") else s for s in SIDES}
_TEMPLATES = {
    "reach": "move the gripper above the <colour> block",
    "lift": "pick up the <colour> block",
    "push": "push the <colour> block <direction>",
    "place": "place the <colour> block <side> the <colour> block",
    "stack": "stack the <colour> block on the <colour> block",
    "unstack": "unstack the <colour> block from the <colour> block",
    "tower": "build a tower of <colour>, <colour> and <colour> from the bottom up",
}


def _accepted(name: str, values: Sequence[str]) -> str:
    return f"accepted {name}: {', '.join(values)}"


@dataclass(frozen=True)
class Instruction:
    """One language goal: a skill, the blocks it names (in order) and an optional relation."""

    skill: str
    objects: tuple[str, ...]
    relation: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.objects, str) or not isinstance(self.objects, Iterable):
            raise ValueError(
                "objects must be a tuple of colours, e.g. ('red',) or ('red', 'blue'), "
                f"got {self.objects!r}"
            )
        object.__setattr__(self, "objects", tuple(self.objects))
        if self.skill not in SKILLS:
            raise ValueError(f"unknown skill {self.skill!r}; {_accepted('skills', SKILLS)}")
        for colour in self.objects:
            if colour not in COLOURS:
                raise ValueError(f"unknown colour {colour!r}; {_accepted('colours', COLOURS)}")
        if len(set(self.objects)) != len(self.objects):
            raise ValueError(
                f"a block is named more than once in {self.objects}; name distinct colours"
            )
        n = len(self.objects)
        if self.skill == "tower":
            if not 3 <= n <= MAX_TOWER:
                raise ValueError(f"a tower needs 3 to {MAX_TOWER} blocks, got {n}")
        elif n != _REQUIRED[self.skill]:
            raise ValueError(f"{self.skill} needs {_REQUIRED[self.skill]} block(s), got {n}")
        if self.skill == "push":
            if self.relation not in DIRECTIONS:
                raise ValueError(
                    f"unknown push direction {self.relation!r}; "
                    f"{_accepted('directions', DIRECTIONS)}"
                )
        elif self.skill == "place":
            if self.relation not in SIDES:
                raise ValueError(
                    f"unknown place side {self.relation!r}; {_accepted('sides', SIDES)}"
                )
        elif self.relation is not None:
            raise ValueError(f"{self.skill} takes no relation, got {self.relation!r}")

    def __str__(self) -> str:
        """Return the canonical text of this instruction."""
        blocks = [f"the {colour} block" for colour in self.objects]
        if self.skill == "reach":
            return f"move the gripper above {blocks[0]}"
        if self.skill == "lift":
            return f"pick up {blocks[0]}"
        if self.skill == "push":
            return f"push {blocks[0]} {_DIRECTION_TEXT[self.relation]}"
        if self.skill == "place":
            return f"place {blocks[0]} {_SIDE_TEXT[self.relation]} {blocks[1]}"
        if self.skill == "stack":
            return f"stack {blocks[0]} on {blocks[1]}"
        if self.skill == "unstack":
            return f"unstack {blocks[0]} from {blocks[1]}"
        names = ", ".join(self.objects[:-1]) + " and " + self.objects[-1]
        return f"build a tower of {names} from the bottom up"


def canonical_templates() -> dict[str, str]:
    """Map each skill to its canonical text with placeholders, for errors, docs and prompts."""
    return dict(_TEMPLATES)


def required_blocks(skill: str) -> int:
    """Return the fewest blocks a scene needs for an instruction of this skill."""
    if skill not in _REQUIRED:
        raise ValueError(f"unknown skill {skill!r}; {_accepted('skills', SKILLS)}")
    return _REQUIRED[skill]


_B = r"(?:the )?([a-z]+)(?: block)?"
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (skill, re.compile(pattern))
    for skill, pattern in (
        ("reach", rf"(?:move the gripper above|move above|reach above|reach) {_B}"),
        ("lift", rf"(?:pick up|lift|grasp and lift) {_B}"),
        ("lift", rf"pick {_B} up"),
        ("push", rf"(?:push|slide) {_B} (?:to the )?([a-z]+)"),
        ("place", rf"(?:place|put) {_B} (to the left of|to the right of|in front of|behind) {_B}"),
        ("stack", rf"stack {_B} on {_B}"),
        ("stack", rf"(?:put|place) {_B} on(?: top of)? {_B}"),
        ("unstack", rf"(?:unstack|remove) {_B} from {_B}"),
        ("unstack", rf"take {_B} off {_B}"),
        ("tower", r"build a tower (?:of|with) (.+?)(?: from the bottom up)?"),
    )
)
_SPACES = re.compile(r"\s+")
_COMMA = re.compile(r"\s*,\s*")
_TOWER_SPLIT = re.compile(r",? and |, ")
_BLOCK = re.compile(_B)
_SIDE_FROM_TEXT = {text: side for side, text in _SIDE_TEXT.items()}


def _unknown_text(text: str) -> ValueError:
    """The error for a text no form matches: the text, then every accepted form and the words
    that fill its slots, one per line."""
    lines = [
        f"cannot parse instruction {text!r}; accepted forms:",
        *(f"  {skill}: {template}" for skill, template in _TEMPLATES.items()),
        _accepted("colours", COLOURS),
        _accepted("directions", [_DIRECTION_TEXT[d] for d in DIRECTIONS]),
        _accepted("sides", [_SIDE_TEXT[s] for s in SIDES]),
    ]
    return ValueError("\n".join(lines))


def _tower_colours(names: str, text: str) -> tuple[str, ...]:
    colours = []
    for item in _TOWER_SPLIT.split(names):
        match = _BLOCK.fullmatch(item)
        if match is None:
            raise _unknown_text(text)
        colours.append(match.group(1))
    return tuple(colours)


def parse(text: str) -> Instruction:
    """Parse an instruction text (canonical or a documented paraphrase) into an Instruction;
    TypeError for anything but a str (e.g. None, or an Instruction, which needs no parsing)."""
    if not isinstance(text, str):
        raise TypeError(f"an instruction to parse must be text (str), got {type(text).__name__}")
    clean = _SPACES.sub(" ", text).strip().lower().rstrip(".").strip()
    clean = _COMMA.sub(", ", clean)
    for skill, pattern in _PATTERNS:
        match = pattern.fullmatch(clean)
        if match is None:
            continue
        groups = match.groups()
        if skill == "tower":  # an unreadable colour list raises the accepted forms itself
            fields = (_tower_colours(groups[0], text),)
        elif skill == "push":
            if groups[1] == "block":  # the colour's "block" was read as the direction
                raise ValueError(
                    f"cannot parse instruction {text!r}: a push needs a direction; "
                    f"{_accepted('directions', [_DIRECTION_TEXT[d] for d in DIRECTIONS])}"
                )
            fields = ((groups[0],), groups[1])
        elif skill == "place":
            fields = ((groups[0], groups[2]), _SIDE_FROM_TEXT[groups[1]])
        else:
            fields = (groups,)
        try:
            return Instruction(skill, *fields)
        except ValueError as error:
            raise ValueError(f"cannot parse instruction {text!r}: {error}") from None
    raise _unknown_text(text)


_SLOTS = len(SKILLS)
_DIR0 = _SLOTS + MAX_TOWER * len(COLOURS)
_SIDE0 = _DIR0 + len(DIRECTIONS)


def encode(instruction: Instruction) -> np.ndarray:
    """Encode an instruction as a fixed-size float32 vector, usable as a goal observation."""
    goal = np.zeros(GOAL_SIZE, dtype=np.float32)
    goal[SKILLS.index(instruction.skill)] = 1.0
    for slot, colour in enumerate(instruction.objects):
        goal[_SLOTS + slot * len(COLOURS) + COLOURS.index(colour)] = 1.0
    if instruction.skill == "push":
        goal[_DIR0 + DIRECTIONS.index(instruction.relation)] = 1.0
    elif instruction.skill == "place":
        goal[_SIDE0 + SIDES.index(instruction.relation)] = 1.0
    return goal


def _one_hot_index(block: np.ndarray, what: str) -> int | None:
    hot = np.flatnonzero(block)
    if len(hot) > 1:
        raise ValueError(f"goal vector has {len(hot)} {what} entries set, expected at most one")
    return int(hot[0]) if len(hot) else None


def decode(goal: np.ndarray) -> Instruction:
    """Invert `encode`, raising ValueError when the vector is not a valid encoding."""
    goal = np.asarray(goal)
    if goal.shape != (GOAL_SIZE,):
        raise ValueError(f"goal vector must have shape ({GOAL_SIZE},), got {goal.shape}")
    if not np.all((goal == 0) | (goal == 1)):
        raise ValueError("goal vector entries must all be 0 or 1")
    skill = _one_hot_index(goal[:_SLOTS], "skill")
    if skill is None:
        raise ValueError("goal vector has no skill set")
    slots = goal[_SLOTS:_DIR0].reshape(MAX_TOWER, len(COLOURS))
    indices = [_one_hot_index(slot, f"slot {i} colour") for i, slot in enumerate(slots)]
    used = [index for index in indices if index is not None]
    if indices[: len(used)] != used:
        raise ValueError("goal vector uses argument slots that are not a leading run")
    direction = _one_hot_index(goal[_DIR0:_SIDE0], "direction")
    side = _one_hot_index(goal[_SIDE0:], "side")
    if direction is not None and side is not None:
        raise ValueError("goal vector sets both a direction and a side")
    relation = DIRECTIONS[direction] if direction is not None else None
    if side is not None:
        relation = SIDES[side]
    return Instruction(SKILLS[skill], tuple(COLOURS[index] for index in used), relation)


def _check_colours(colours: Sequence[str]) -> None:
    for colour in colours:
        if colour not in COLOURS:
            raise ValueError(f"unknown colour {colour!r}; {_accepted('colours', COLOURS)}")
    if len(set(colours)) != len(colours):
        raise ValueError(f"scene colours repeat: {tuple(colours)}")


def _relations(skill: str) -> tuple[str | None, ...]:
    return {"push": DIRECTIONS, "place": SIDES}.get(skill, (None,))


def sample(
    skill: str, colours: Sequence[str], rng: np.random.Generator, n_tower: int | None = None
) -> Instruction:
    """Draw a uniformly random instruction of one skill over the scene's colours, using only rng."""
    _check_colours(colours)
    need = required_blocks(skill)
    if len(colours) < need:
        raise ValueError(f"{skill} needs at least {need} blocks, the scene has {len(colours)}")
    if skill == "tower":
        count = len(colours) if n_tower is None else n_tower
        if not 3 <= count <= min(len(colours), MAX_TOWER):
            raise ValueError(
                f"n_tower must be between 3 and {min(len(colours), MAX_TOWER)} "
                f"for a scene of {len(colours)} blocks, got {count}"
            )
    elif n_tower is not None:
        raise ValueError(f"n_tower only applies to tower, not {skill}")
    else:
        count = need
    order = rng.permutation(len(colours))[:count]
    relations = _relations(skill)
    relation = relations[int(rng.integers(len(relations)))]
    return Instruction(skill, tuple(colours[int(i)] for i in order), relation)


def all_instructions(colours: Sequence[str], skills: Sequence[str] = SKILLS) -> list[Instruction]:
    """List every instruction of the given skills over the scene's colours, in a fixed order."""
    _check_colours(colours)
    result = []
    for skill in skills:
        need = required_blocks(skill)
        top = min(len(colours), MAX_TOWER) if skill == "tower" else need
        for count in range(need, top + 1):
            for objects in itertools.permutations(colours, count):
                result.extend(Instruction(skill, objects, r) for r in _relations(skill))
    return result
