"""Curricula: what instruction the learner practises next, learned from episode outcomes.

Every curriculum implements one small interface (after Syllabus, the curriculum library whose
task samplers all share a propose/update contract), so the harness treats them alike:

- `propose()` returns the canonical text of the next instruction to practise;
- `update(instruction, success, episode_return)` reports how an episode of it went;
- `propose_batch(n)` and `update_batch(outcomes)` do the same for loops that collect many
  episodes per iteration;
- `state_dict()` / `load_state_dict(state)` save and restore everything, the random generator
  included, so a resumed run proposes exactly what the uninterrupted one would have.

Three curricula live here: `fixed` (uniform over a task set), `hand` (stages read from a TOML
file, advanced on a success rate) and `lp` (learning progress); the fourth, `vlm`, lives in
`vlm_curriculum.py`. `make_curriculum` builds any of them by name. An outcome whose instruction
parses but is not among a curriculum's tasks is ignored.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gameon.benchmark.atomic import atomic_write
from gameon.envs import ENV_IDS, ENV_SKILLS
from gameon.envs.language import COLOURS, SKILLS, all_instructions, parse

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HAND_CURRICULUM_TOML = Path(__file__).with_name("hand_curriculum.toml")
"""The shipped hand-designed curriculum: reach -> lift -> place -> stack -> tower."""
CURRICULA = ("fixed", "hand", "lp", "vlm")


@dataclass(frozen=True)
class Outcome:
    """How one episode of an instruction went: the unit a curriculum learns from."""

    instruction: str
    success: bool
    episode_return: float


def canonical(text: str) -> str:
    """Return the canonical text of an instruction, raising ValueError if it does not parse."""
    return str(parse(text))


def scene_colours(blocks: int | Sequence[str] = 3) -> tuple[str, ...]:
    """Return a scene's block colours from a count (the first n colours) or an explicit list."""
    if isinstance(blocks, int):
        if not 1 <= blocks <= len(COLOURS):
            raise ValueError(f"blocks must be 1 to {len(COLOURS)}, got {blocks}")
        return COLOURS[:blocks]
    return tuple(blocks)


def task_set(env_or_skills: str | Sequence[str], colours: int | Sequence[str] = 3) -> list[str]:
    """List the canonical instructions of an env id (or of skills) over a scene's colours."""
    if isinstance(env_or_skills, str) and env_or_skills in ENV_SKILLS:
        skills = ENV_SKILLS[env_or_skills][0]
    elif isinstance(env_or_skills, str) and env_or_skills in SKILLS:
        skills = (env_or_skills,)
    elif isinstance(env_or_skills, str):
        raise ValueError(
            f"unknown env id or skill {env_or_skills!r}; accepted env ids: {', '.join(ENV_IDS)}; "
            f"accepted skills: {', '.join(SKILLS)}"
        )
    else:
        skills = tuple(env_or_skills)
    for skill in skills:
        if skill not in SKILLS:
            raise ValueError(f"unknown skill {skill!r}; accepted skills: {', '.join(SKILLS)}")
    return [str(instruction) for instruction in all_instructions(scene_colours(colours), skills)]


def _canonical_tasks(tasks: Sequence[str]) -> tuple[str, ...]:
    """Canonicalise and deduplicate a task list, keeping the first occurrence's order."""
    if isinstance(tasks, str):
        raise ValueError("tasks must be a list of instructions, not one string")
    unique = tuple(dict.fromkeys(canonical(task) for task in tasks))
    if not unique:
        raise ValueError("a curriculum needs at least one task")
    return unique


def _check_state(state: Mapping[str, Any], name: str, tasks: Sequence[str]) -> None:
    """Refuse a state saved by another kind of curriculum or for another task set."""
    if state.get("name") != name:
        raise ValueError(f"state is for curriculum {state.get('name')!r}, not {name!r}")
    if list(state.get("tasks", [])) != list(tasks):
        raise ValueError(f"state was saved for other tasks than this {name} curriculum's")


class Curriculum(ABC):
    """Proposes instruction texts and learns from episode outcomes; the batch forms loop."""

    name: ClassVar[str]

    def __init__(self, seed: int | None = 0) -> None:
        self.rng = np.random.default_rng(seed)

    @abstractmethod
    def propose(self) -> str:
        """Return the canonical text of the next instruction to practise."""

    @abstractmethod
    def update(self, instruction: str, success: bool, episode_return: float) -> None:
        """Learn from one finished episode; raises ValueError if the instruction does not parse."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Return everything needed to resume, as plain JSON-serialisable Python values."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from `state_dict`, so future proposals match the saved run's."""

    def close(self) -> None:
        """Release what the curriculum holds (nothing, except the vlm curriculum's renderer)."""
        return None

    def propose_batch(self, n: int) -> list[str]:
        """Return n proposals, one per episode to start."""
        return [self.propose() for _ in range(n)]

    def update_batch(self, outcomes: Sequence[Outcome]) -> None:
        """Learn from several finished episodes, in order."""
        for outcome in outcomes:
            self.update(outcome.instruction, outcome.success, outcome.episode_return)

    def _rng_state(self) -> dict[str, Any]:
        return dict(self.rng.bit_generator.state)

    def _load_rng_state(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = dict(state)


class FixedCurriculum(Curriculum):
    """Uniform over a fixed task set: the baseline every other curriculum must beat."""

    name = "fixed"

    def __init__(self, tasks: Sequence[str], seed: int | None = 0) -> None:
        super().__init__(seed)
        self.tasks = _canonical_tasks(tasks)

    def propose(self) -> str:
        return self.tasks[int(self.rng.integers(len(self.tasks)))]

    def update(self, instruction: str, success: bool, episode_return: float) -> None:
        canonical(instruction)

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "tasks": list(self.tasks), "rng": self._rng_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_state(state, self.name, self.tasks)
        self._load_rng_state(state["rng"])


@dataclass(frozen=True)
class Stage:
    """One stage of a hand curriculum: its tasks and when to move on (rate over a window)."""

    name: str
    tasks: tuple[str, ...]
    window: int
    threshold: float

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError(f"stage {self.name!r} has no tasks")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"stage {self.name!r}: window must be a positive integer")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)):
            raise ValueError(f"stage {self.name!r}: threshold must be a number in [0, 1]")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(
                f"stage {self.name!r}: threshold must be in [0, 1], got {self.threshold}"
            )


_STAGE_KEYS = {"name", "skills", "instructions", "window", "threshold"}
_TOP_KEYS = {"review", "stage"}


def _stage_from_config(index: int, config: Mapping[str, Any], colours: tuple[str, ...]) -> Stage:
    """Build a Stage from one [[stage]] table, naming whatever is missing or wrong."""
    label = f"stage {index}"
    if not isinstance(config, Mapping):
        raise ValueError(f"{label} must be a table")
    unknown = set(config) - _STAGE_KEYS
    if unknown:
        raise ValueError(
            f"{label}: unknown keys {sorted(unknown)}; accepted keys: {sorted(_STAGE_KEYS)}"
        )
    for key in ("name", "window", "threshold"):
        if key not in config:
            raise ValueError(f"{label}: missing key {key!r}")
    label = f"stage {index} ({config['name']!r})"
    if "skills" not in config and "instructions" not in config:
        raise ValueError(f"{label}: give 'skills', 'instructions' or both")
    skills = list(config.get("skills", []))
    for skill in skills:
        if skill not in SKILLS:
            raise ValueError(f"{label}: unknown skill {skill!r}; accepted: {', '.join(SKILLS)}")
    tasks = task_set(skills, colours) if skills else []
    for text in config.get("instructions", []):
        try:
            instruction = parse(text)
        except ValueError as error:
            raise ValueError(f"{label}: {error}") from None
        missing = [colour for colour in instruction.objects if colour not in colours]
        if missing:
            raise ValueError(
                f"{label}: {text!r} names {', '.join(missing)}; the scene has {', '.join(colours)}"
            )
        tasks.append(str(instruction))
    if not tasks:
        raise ValueError(f"{label}: no tasks for a scene of {', '.join(colours)}")
    try:
        return Stage(
            str(config["name"]),
            tuple(dict.fromkeys(tasks)),
            config["window"],
            config["threshold"],
        )
    except ValueError as error:
        raise ValueError(f"{label}: {error}") from None


class HandCurriculum(Curriculum):
    """Stages in a fixed order; a stage ends when its success rate over a window is high enough.

    Within a stage tasks are sampled uniformly; with probability `review` a task of an earlier
    stage is practised instead, so mastered skills are not forgotten. Only outcomes of the current
    stage's tasks fill its window; the last stage never ends (`mastered` says when its rule holds).
    """

    name = "hand"

    def __init__(self, stages: Sequence[Stage], seed: int | None = 0, review: float = 0.1) -> None:
        super().__init__(seed)
        if not stages:
            raise ValueError("a hand curriculum needs at least one stage")
        if not 0.0 <= review <= 1.0:
            raise ValueError(f"review must be in [0, 1], got {review}")
        self.stages = tuple(stages)
        self.review = float(review)
        self.stage = 0
        self.window: list[bool] = []

    @classmethod
    def from_toml(
        cls,
        path: str | Path = HAND_CURRICULUM_TOML,
        colours: int | Sequence[str] = 3,
        seed: int | None = 0,
    ) -> HandCurriculum:
        """Read stages from a TOML file (see hand_curriculum.toml), raising ValueError if bad."""
        with open(path, "rb") as file:
            try:
                config = tomllib.load(file)
            except tomllib.TOMLDecodeError as error:
                raise ValueError(f"{path}: not valid TOML: {error}") from None
        try:
            return cls.from_config(config, colours, seed)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        colours: int | Sequence[str] = 3,
        seed: int | None = 0,
    ) -> HandCurriculum:
        """Build from the parsed TOML document: optional `review`, a list of `stage` tables."""
        unknown = set(config) - _TOP_KEYS
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}; accepted keys: {sorted(_TOP_KEYS)}")
        stages = config.get("stage")
        if not isinstance(stages, list) or not stages:
            raise ValueError("missing key 'stage': give at least one [[stage]] table")
        scene = scene_colours(colours)
        built = [_stage_from_config(i, stage, scene) for i, stage in enumerate(stages)]
        review = config.get("review", 0.1)
        if isinstance(review, bool) or not isinstance(review, (int, float)):
            raise ValueError(f"review must be a number in [0, 1], got {review!r}")
        return cls(built, seed, review)

    @property
    def stage_name(self) -> str:
        """Name of the stage being practised."""
        return self.stages[self.stage].name

    @property
    def tasks(self) -> tuple[str, ...]:
        """Every task of every stage, in stage order."""
        return tuple(dict.fromkeys(task for stage in self.stages for task in stage.tasks))

    @property
    def mastered(self) -> bool:
        """Whether the last stage's rule holds: the whole curriculum is learned."""
        return self.stage == len(self.stages) - 1 and self._rule_holds()

    def _rule_holds(self) -> bool:
        stage = self.stages[self.stage]
        full = len(self.window) == stage.window
        return full and sum(self.window) >= stage.threshold * stage.window

    def _review_tasks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for stage in self.stages[: self.stage] for t in stage.tasks))

    def propose(self) -> str:
        tasks = self.stages[self.stage].tasks
        if self.stage > 0 and self.review > 0 and self.rng.random() < self.review:
            tasks = self._review_tasks()
        return tasks[int(self.rng.integers(len(tasks)))]

    def update(self, instruction: str, success: bool, episode_return: float) -> None:
        stage = self.stages[self.stage]
        if canonical(instruction) not in stage.tasks:
            return
        self.window = [*self.window, bool(success)][-stage.window :]
        if self.stage < len(self.stages) - 1 and self._rule_holds():
            self.stage += 1
            self.window = []

    def state_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tasks": list(self.tasks),
            "stage": self.stage,
            "window": list(self.window),
            "rng": self._rng_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_state(state, self.name, self.tasks)
        if not 0 <= int(state["stage"]) < len(self.stages):
            raise ValueError(f"state stage {state['stage']} is not one of {len(self.stages)}")
        self.stage = int(state["stage"])
        self.window = [bool(success) for success in state["window"]]
        self._load_rng_state(state["rng"])


class LearningProgressCurriculum(Curriculum):
    """Samples tasks whose success rate is changing: learning progress = |fast EMA - slow EMA|.

    Each task keeps a fast and a slow exponential moving average of its success, both set to the
    first outcome. Their gap is large while success rises (or falls: forgetting) and vanishes once
    it is flat, at 0 or at 1. With probability 1 - explore a task is drawn in proportion to its
    progress (uniformly if no task shows any), otherwise uniformly. References: Matiisen et al.
    2017, "Teacher-student curriculum learning"; Portelas et al. 2020, ALP-GMM; Kanitscheider et
    al. 2021, "Multi-task curriculum learning in a complex, visual, hard-exploration domain:
    Minecraft", whose fast/slow EMA estimate this follows.
    """

    name = "lp"

    def __init__(
        self,
        tasks: Sequence[str],
        seed: int | None = 0,
        fast: float = 0.1,
        slow: float = 0.01,
        explore: float = 0.2,
    ) -> None:
        super().__init__(seed)
        if not 0.0 < slow < fast <= 1.0:
            raise ValueError(f"EMA rates must satisfy 0 < slow < fast <= 1, got {slow}, {fast}")
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore must be in [0, 1], got {explore}")
        self.tasks = _canonical_tasks(tasks)
        self.fast_rate, self.slow_rate, self.explore = float(fast), float(slow), float(explore)
        self._index = {task: i for i, task in enumerate(self.tasks)}
        self.fast = [0.0] * len(self.tasks)
        self.slow = [0.0] * len(self.tasks)
        self.seen = [False] * len(self.tasks)

    def progress(self) -> np.ndarray:
        """Learning progress of every task, in task order."""
        return np.abs(np.asarray(self.fast) - np.asarray(self.slow))

    def probabilities(self) -> np.ndarray:
        """Sampling probability of every task, in task order."""
        n = len(self.tasks)
        progress = self.progress()
        total = progress.sum()
        focus = progress / total if total > 0 else np.full(n, 1.0 / n)
        return (1.0 - self.explore) * focus + self.explore / n

    def propose(self) -> str:
        return self.tasks[int(self.rng.choice(len(self.tasks), p=self.probabilities()))]

    def update(self, instruction: str, success: bool, episode_return: float) -> None:
        i = self._index.get(canonical(instruction))
        if i is None:
            return
        value = float(bool(success))
        if not self.seen[i]:
            self.fast[i], self.slow[i], self.seen[i] = value, value, True
            return
        self.fast[i] += self.fast_rate * (value - self.fast[i])
        self.slow[i] += self.slow_rate * (value - self.slow[i])

    def state_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tasks": list(self.tasks),
            "fast": list(self.fast),
            "slow": list(self.slow),
            "seen": list(self.seen),
            "rng": self._rng_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_state(state, self.name, self.tasks)
        self.fast = [float(value) for value in state["fast"]]
        self.slow = [float(value) for value in state["slow"]]
        self.seen = [bool(value) for value in state["seen"]]
        self._load_rng_state(state["rng"])


def make_curriculum(
    name: str, tasks: Sequence[str] | None = None, seed: int | None = 0, **options: Any
) -> Curriculum:
    """Build a curriculum by name: fixed | hand | lp | vlm.

    fixed, lp and vlm need `tasks`. hand reads `path` (default: the shipped TOML) for a scene of
    `colours` (default 3 blocks); when `tasks` is given, every stage task must be among them.
    `options` go to the curriculum's constructor (lp: fast, slow, explore); vlm takes them as
    `make_vlm_curriculum` does (backend name or instance, model, base_url, transcript,
    replay_path, interval, proposal_size, ...).
    """
    if name not in CURRICULA:
        raise ValueError(f"unknown curriculum {name!r}; accepted: {', '.join(CURRICULA)}")
    if name == "hand":
        return _make_hand(tasks, seed, **options)
    if tasks is None:
        raise ValueError(f"the {name} curriculum needs tasks, e.g. task_set(env_id)")
    if name == "fixed":
        return FixedCurriculum(tasks, seed, **options)
    if name == "vlm":
        from gameon.experimenter.vlm_curriculum import make_vlm_curriculum

        return make_vlm_curriculum(tasks, seed, **options)
    return LearningProgressCurriculum(tasks, seed, **options)


def _make_hand(
    tasks: Sequence[str] | None,
    seed: int | None,
    path: str | Path = HAND_CURRICULUM_TOML,
    colours: int | Sequence[str] = 3,
) -> HandCurriculum:
    """Load a hand curriculum and check the target env accepts every task it may propose."""
    curriculum = HandCurriculum.from_toml(path, colours, seed)
    if tasks is not None:
        allowed = set(_canonical_tasks(tasks))
        for stage in curriculum.stages:
            outside = [task for task in stage.tasks if task not in allowed]
            if outside:
                raise ValueError(
                    f"hand curriculum stage {stage.name!r} proposes tasks outside the given "
                    f"tasks, e.g. {outside[0]!r}; use an env that accepts them "
                    "(GameOn/MultiSkill-v0 accepts every skill) or another curriculum file"
                )
    return curriculum


# -- helpers for learners that train under a curriculum ---------------------------------------


def curriculum_for_env(
    env_id: str,
    name: str,
    seed: int,
    hand_path: str | Path | None = None,
    targets_only: bool = False,
    vlm_options: Mapping[str, Any] | None = None,
) -> Curriculum:
    """A curriculum over an env's tasks; a ValueError says why it cannot train there.

    `vlm_options` go to the vlm curriculum (see `make_vlm_curriculum`); its scene camera
    defaults to the env's front camera.
    """
    import gymnasium as gym

    import gameon.envs  # noqa: F401  (registers the ids)

    probe = gym.make(env_id)
    skills, colours = probe.unwrapped.skills, probe.unwrapped.colours
    probe.close()
    if targets_only:
        skills = ENV_SKILLS[env_id][0]
    tasks = task_set(skills, colours)
    options = {}
    if name == "hand":
        path = Path(hand_path) if hand_path else HAND_CURRICULUM_TOML
        if not path.is_file():
            raise ValueError(f"hand_curriculum: no file at {path}")
        options = {"path": path, "colours": colours}
    if name == "vlm":
        options = {"camera_env_id": env_id, **dict(vlm_options or {})}
    elif vlm_options:
        raise ValueError(f"vlm options are only read by the vlm curriculum, not {name!r}")
    try:
        return make_curriculum(name, tasks, seed, **options)
    except ValueError as error:
        raise ValueError(f"curriculum {name!r} cannot train on {env_id}: {error}") from None


def skill_probabilities(curriculum: LearningProgressCurriculum) -> dict[str, float]:
    """The lp curriculum's sampling probability of each skill (summed over its instructions)."""
    totals: dict[str, float] = {}
    for task, probability in zip(curriculum.tasks, curriculum.probabilities(), strict=True):
        skill = parse(task).skill
        totals[skill] = totals.get(skill, 0.0) + float(probability)
    return totals


def curriculum_brief(curriculum: Curriculum) -> dict:
    """A short, JSON-ready form of a curriculum's state for the summary."""
    if curriculum.name == "vlm":
        return {
            "label": curriculum.label,
            "proposal": list(curriculum.proposal),
            "source": curriculum.source,
            "consults": curriculum.consults,
            "skill_probabilities": skill_probabilities(curriculum.lp),
        }
    if isinstance(curriculum, HandCurriculum):
        return {
            "stage": curriculum.stage_name,
            "stage_index": curriculum.stage,
            "mastered": curriculum.mastered,
        }
    if isinstance(curriculum, LearningProgressCurriculum):
        return {"skill_probabilities": skill_probabilities(curriculum)}
    return {"tasks": len(curriculum.tasks)}


NO_VLM_USAGE: dict[str, Any] = {
    "backend": None,
    "model": None,
    "calls": 0,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "cost_usd": 0.0,
    "fallbacks": 0,
}
"""The VLM usage of a curriculum that asks no model (the keys of benchmark.records.VLMUsage)."""


def vlm_usage(curriculum: Curriculum) -> dict[str, Any]:
    """What the curriculum asked of a VLM: calls, tokens, cost, fallbacks (zeros if no model)."""
    if curriculum.name == "vlm":
        return curriculum.usage()
    return dict(NO_VLM_USAGE)


def curriculum_label(curriculum: Curriculum) -> str:
    """How results are labelled: the name, with the backend for vlm (e.g. "vlm[rules]")."""
    return curriculum.label if curriculum.name == "vlm" else curriculum.name


def curriculum_scalars(curriculum: Curriculum) -> dict[str, float]:
    """What to plot over training: hand's stage index; lp's sampling probability per skill."""
    if isinstance(curriculum, HandCurriculum):
        return {"curriculum/stage": float(curriculum.stage)}
    if isinstance(curriculum, LearningProgressCurriculum):
        return {f"curriculum/p_{s}": p for s, p in skill_probabilities(curriculum).items()}
    if curriculum.name == "vlm":
        usage = curriculum.usage()
        return {"vlm/calls": float(usage["calls"]), "vlm/fallbacks": float(usage["fallbacks"])}
    return {}


def save_curriculum(path: Path, curriculum: Curriculum) -> None:
    """Write the curriculum's state_dict as JSON atomically (load it with load_state_dict)."""
    atomic_write(path, json.dumps(curriculum.state_dict()))
