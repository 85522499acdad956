"""Seeded start layouts: where the blocks stand and where the hand starts, given the instruction.

Blocks never overlap and stay inside the block area; the layout also makes the instruction
possible (the top block of an unstack starts on its base, a pushed block has a free lane, a placed
block has a free spot beside its reference).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gameon.envs.language import Instruction
from gameon.envs.oracle import BLOCK_SIZE, DIRECTION_VECTORS, SIDE_VECTORS
from gameon.envs.world import BLOCK_AREA_HIGH, BLOCK_AREA_LOW

MIN_SPACING = 0.085
"""Minimum distance between block centres at reset (a 5 cm cube's diagonal plus margin), m."""
PUSH_LANE = 0.14
"""A pushed block has this much free room along its direction, ending at most 3 cm outside the
block area (still well inside the workspace), m."""
SINK = 1e-4
"""Blocks start this far into their support, so the very first observation reports the contact."""
PLACE_OFFSET = 0.075
"""Where a placed block should go: this far from its reference along the side, m (the middle of
NEXT_TO_RANGE). The layout keeps this spot free and the place expert aims at it; the dense reward
aims 5 mm nearer (rewards.PLACE_SHAPING_OFFSET)."""
HAND_START_LOW = np.array([0.40, -0.12, 0.18])
"""The hand starts at a uniform point of this box (TCP position), m."""
HAND_START_HIGH = np.array([0.60, 0.12, 0.30])
HAND_START_YAW = 0.3
"""...with a uniform yaw offset within this of its home yaw, rad."""
MAX_TRIES = 1000


@dataclass(frozen=True)
class Layout:
    """Start state of one episode."""

    block_pos: np.ndarray
    block_yaw: np.ndarray
    hand_pos: np.ndarray
    hand_yaw: float


def sample_layout(
    rng: np.random.Generator, colours: tuple[str, ...], instruction: Instruction
) -> Layout:
    """A random start layout in which the instruction can be carried out."""
    index = {c: i for i, c in enumerate(colours)}
    for _ in range(MAX_TRIES):
        xy = rng.uniform(BLOCK_AREA_LOW, BLOCK_AREA_HIGH, size=(len(colours), 2))
        yaw = rng.uniform(-np.pi / 4, np.pi / 4, size=len(colours))
        if _spread(xy) and _feasible(xy, instruction, index):
            break
    else:
        raise RuntimeError(f"no feasible layout for {instruction!r} after {MAX_TRIES} tries")
    z = np.full(len(colours), BLOCK_SIZE / 2 - SINK)
    if instruction.skill == "unstack":
        top, bottom = (index[c] for c in instruction.objects)
        xy[top] = xy[bottom]
        yaw[top] = yaw[bottom]
        z[top] += BLOCK_SIZE - SINK
    return Layout(
        block_pos=np.column_stack((xy, z)),
        block_yaw=yaw,
        hand_pos=rng.uniform(HAND_START_LOW, HAND_START_HIGH),
        hand_yaw=float(rng.uniform(-HAND_START_YAW, HAND_START_YAW)),
    )


def _spread(xy: np.ndarray) -> bool:
    gaps = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
    return bool((gaps[np.triu_indices(len(xy), 1)] >= MIN_SPACING).all())


def _inside(point: np.ndarray, margin: float = 0.0) -> bool:
    low, high = BLOCK_AREA_LOW - margin, BLOCK_AREA_HIGH + margin
    return bool(np.all(point >= low) and np.all(point <= high))


def _clear(point: np.ndarray, xy: np.ndarray, skip: tuple[int, ...]) -> bool:
    others = np.delete(xy, skip, axis=0)
    return bool((np.linalg.norm(others - point, axis=1) >= MIN_SPACING).all())


def _feasible(xy: np.ndarray, instruction: Instruction, index: dict[str, int]) -> bool:
    objects = tuple(index[c] for c in instruction.objects)
    if instruction.skill == "push":
        (block,) = objects
        direction = np.array(DIRECTION_VECTORS[instruction.relation])
        behind = xy[block] - 0.08 * direction
        lane = [xy[block] + t * direction for t in np.linspace(0.04, PUSH_LANE, 5)]
        return (
            _inside(behind, 0.05)
            and all(_inside(p, 0.03) and _clear(p, xy, objects) for p in lane)
            and _clear(behind, xy, objects)
        )
    if instruction.skill == "place":
        block, reference = objects
        spot = xy[reference] + PLACE_OFFSET * np.array(SIDE_VECTORS[instruction.relation])
        return _inside(spot) and _clear(spot, xy, (reference,))
    return True
