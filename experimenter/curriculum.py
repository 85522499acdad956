"""Curricula: what instruction the learner practises next, learned from episode outcomes.

Every curriculum implements one small interface (after Syllabus, the curriculum library whose
task samplers all share a propose/update contract), so the harness treats them alike:

- `propose()` returns the canonical text of the next instruction to practise;
- `update(instruction, success, episode_return)` reports how an episode of it went;
- `propose_batch(n)` and `update_batch(outcomes)` do the same for loops that collect many
  episodes per iteration (the learner's own attempts);
- `update_evaluation(outcomes)` reports the learner's evaluation episodes after a retraining, one
  per suite episode (by default the same as `update_batch`);
- `state_dict()` / `load_state_dict(state)` save and restore everything, the random generator
  included, so a resumed run proposes exactly what the uninterrupted one would have;
- `label`, `usage()`, `brief()` and `scalars()` say how results are labelled, what a VLM was
  asked, and what to put in a summary and plot over training.

Curricula here: `fixed` (uniform over a task set), `hand` (stages read from a TOML file, advanced
on a success rate), `lp` (learning progress, per task or per skill) and two controls that check
the harness itself: `positive_control` (privileged: practises the first not yet mastered skill of
the target's prerequisite chain, read from the learner's evaluations) and `negative_control`
(spends the budget on reach and push tasks the target does not need). The `vlm` curriculum lives
in `vlm_curriculum.py`, the registry that sees them all in `curricula.py` (`make_curriculum`,
`curriculum_for_env`). What differs between curricula is said by the curricula themselves
(`setup_options`, `settings`, `reads_budget`, `usage()`, `use_library`, `experimenter`), never
by a test of a curriculum's name, so a new curriculum is one class plus one line in the registry.
An outcome whose instruction parses but is not among a curriculum's tasks is ignored.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gameon.atomic import atomic_write
from gameon.envs import ENV_IDS, ENV_SKILLS
from gameon.envs.language import COLOURS, SKILLS, all_instructions, parse
from gameon.experimenter.skills import SkillLibrary
from gameon.records import VLMUsage
from gameon.text import plural

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HAND_CURRICULUM_TOML = Path(__file__).with_name("hand_curriculum.toml")
"""The shipped hand-designed curriculum: reach -> lift -> place -> stack -> tower."""
DEFAULT_MIN_WINDOW = 3
"""Smallest window a `window_share` stage gets when the TOML sets no `min_window`."""
LP_GROUPS = ("task", "skill")
"""What the lp curriculum keeps learning progress of: each task, or each skill (shared)."""
PREREQUISITES: dict[str, tuple[str, ...]] = {
    "reach": ("reach",),
    "lift": ("lift",),
    "push": ("push",),
    "place": ("lift", "place"),
    "stack": ("lift", "stack"),
    "unstack": ("lift", "unstack"),
    "tower": ("lift", "stack", "tower"),
}
"""Each skill's prerequisite chain, ending with the skill itself (what the positive control
knows)."""
DISTRACTOR_SKILLS = ("reach", "push")
"""The skills the negative control may practise, outside the target's chain."""
NO_VLM_USAGE: dict[str, Any] = VLMUsage().model_dump()
"""The VLM usage of a curriculum that asks no model: gameon.records.VLMUsage's defaults."""


@dataclass(frozen=True)
class CurriculumSetup:
    """What `curriculum_for_env` knows when it builds a curriculum: the env it trains on and the
    caller's settings, each read only by the curricula that need it (`setup_options`)."""

    env_id: str
    colours: Sequence[str]
    """the env's block colours"""
    hand_path: str | Path | None = None
    """hand: the TOML file of its stages (None: the shipped one)"""
    vlm_options: Mapping[str, Any] | None = None
    """vlm: options of `make_vlm_curriculum` (backend, model, transcript, interval, ...)"""
    group: str | None = None
    """lp and the vlm's background lp: keep learning progress per task or skill (None: task)"""


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


class CurriculumChanged(ValueError):
    """A resume whose curriculum is set up otherwise than the saved run's (e.g. an edited stages
    file): said as it is, and the run folder left as it was."""


def _check_state(state: Mapping[str, Any], name: str, tasks: Sequence[str]) -> None:
    """Refuse a state saved by another kind of curriculum or for another task set."""
    if state.get("name") != name:
        raise CurriculumChanged(f"state is for curriculum {state.get('name')!r}, not {name!r}")
    if list(state.get("tasks", [])) != list(tasks):
        raise CurriculumChanged(f"state was saved for other tasks than this {name} curriculum's")


class Curriculum(ABC):
    """Proposes instruction texts and learns from episode outcomes; the batch forms loop.

    A subclass sets `name` and `tasks` (the canonical instructions it knows) and implements
    propose/update/state_dict/load_state_dict; `build` is how `make_curriculum` constructs it and
    `setup_options` what it reads of the env it trains on.
    """

    name: ClassVar[str]
    tasks: tuple[str, ...]
    settings: ClassVar[tuple[str, ...]] = ()
    """Run settings (fields of LoopConfig or a learner's Args) that only this curriculum reads;
    `curricula.check_curriculum_settings` refuses them for any other curriculum."""
    practises_off_target: ClassVar[bool] = False
    """Whether it practises only skills its target does not need, so that it has no task on the
    env it is evaluated on: online learners (ppo, sac), which practise there, refuse it
    (`curricula.ONLINE_CURRICULA`); `gameon experiment` practises on another env."""
    keeps_transcript: ClassVar[bool] = False
    """Whether it writes what it asked a model to the run folder (`transcript.jsonl`), so a
    learner builds it again once that folder exists."""
    reads_budget: ClassVar[bool] = False
    """Whether `build` reads the run's budget (hand: its `window_share` stages), so that what it
    decides depends on the iterations a collect run was started with: an extended run keeps
    what it was built with, and the audit re-runs it by starting with those iterations and then
    extending it (`benchmark.audit.plan_rerun`)."""
    experimenter: ClassVar[bool] = False
    """Whether the collect loop runs the experimenter's steps with it (`vlm/collect.py`): consult
    on each iteration's first scene, plan every task, analyse the curves and promote by verdict,
    add verified macro and coded skills. Such a curriculum implements `consult`, `plan`,
    `analyse`, `propose_skill`, `decide_code_or_learn` and `write_code` as the vlm one does."""

    def __init__(self, seed: int | None = 0) -> None:
        self.rng = np.random.default_rng(seed)

    @classmethod
    def build(
        cls,
        tasks: Sequence[str] | None,
        seed: int | None = 0,
        *,
        budget: int | None = None,
        target_skills: Sequence[str] | None = None,
        **options: Any,
    ) -> Curriculum:
        """Construct for `make_curriculum`: `cls(tasks, seed, **options)`; budget and
        target_skills are ignored by curricula that do not read them."""
        if tasks is None:
            raise ValueError(f"the {cls.name} curriculum needs tasks, e.g. task_set(env_id)")
        return cls(tasks, seed, **options)

    @classmethod
    def setup_options(cls, setup: CurriculumSetup) -> dict[str, Any]:
        """The options `build` takes from the env it trains on and the caller's settings: none
        here (a curriculum ignores what it does not read)."""
        return {}

    @property
    def label(self) -> str:
        """How results of this curriculum are labelled (its name unless it says more)."""
        return self.name

    def usage(self) -> dict[str, Any]:
        """What the curriculum asked of a VLM (the keys of records.VLMUsage): zeros here."""
        return VLMUsage().model_dump()

    def use_library(self, library: SkillLibrary) -> None:
        """Hear of the collect run's skill library, which grows during the run (not read here;
        the vlm curriculum describes it to its model)."""
        return None

    def brief(self) -> dict[str, Any]:
        """A short, JSON-ready form of the curriculum's state for a run's summary."""
        return {"tasks": len(self.tasks)}

    def scalars(self) -> dict[str, float]:
        """What to plot over training, by tag (nothing unless the curriculum says)."""
        return {}

    def budget_warning(self, outcomes: int) -> str | None:
        """What the curriculum can never do if it hears only `outcomes` more episode outcomes
        (None: nothing), said before a run so that a setting too large for its budget is
        changed rather than silently ineffective."""
        return None

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

    def update_evaluation(self, outcomes: Sequence[Outcome]) -> None:
        """Learn from the learner's evaluation after a retraining, one outcome per suite episode;
        by default the same as `update_batch`."""
        self.update_batch(outcomes)

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
    window_rule: str = ""
    """How the stages file gives the window ("window 5", "window_share 0.08, min_window 5"): what
    a resume must find unchanged, while a share's window may differ with the run's budget."""

    def __post_init__(self) -> None:
        if not self.window_rule:
            object.__setattr__(self, "window_rule", f"window {self.window}")
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


_STAGE_KEYS = {"name", "skills", "instructions", "window", "window_share", "threshold"}
_TOP_KEYS = {"review", "min_window", "stage"}


def _check_budget(budget: int | None) -> None:
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise ValueError(f"budget must be a whole number of outcomes or None, got {budget!r}")
    if budget is not None and budget < 1:
        raise ValueError(f"budget must be >= 1 outcome, got {budget}")


def _stage_window(
    label: str, config: Mapping[str, Any], budget: int | None, min_window: int
) -> tuple[Any, str]:
    """A stage's window, `window` as given or max(min_window, round(window_share * budget)), and
    how the file gives it (`Stage.window_rule`)."""
    if "window" in config and "window_share" in config:
        raise ValueError(f"{label}: give 'window' or 'window_share', not both")
    if "window" in config:
        return config["window"], f"window {config['window']}"
    if "window_share" not in config:
        raise ValueError(
            f"{label}: missing key 'window' (episodes) or 'window_share' (a fraction of the "
            "run's budget)"
        )
    share = config["window_share"]
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < share <= 1.0:
        raise ValueError(f"{label}: window_share must be a number in (0, 1], got {share!r}")
    if budget is None:
        raise ValueError(
            f"{label}: window_share needs the run's budget (the outcomes it will report); "
            "pass budget=N"
        )
    return max(min_window, round(share * budget)), f"window_share {share}, min_window {min_window}"


def _stage_from_config(
    index: int,
    config: Mapping[str, Any],
    colours: tuple[str, ...],
    budget: int | None = None,
    min_window: int = DEFAULT_MIN_WINDOW,
) -> Stage:
    """Build a Stage from one [[stage]] table, naming whatever is missing or wrong."""
    label = f"stage {index}"
    if not isinstance(config, Mapping):
        raise ValueError(f"{label} must be a table")
    unknown = set(config) - _STAGE_KEYS
    if unknown:
        raise ValueError(
            f"{label}: unknown keys {sorted(unknown)}; accepted keys: {sorted(_STAGE_KEYS)}"
        )
    for key in ("name", "threshold"):
        if key not in config:
            raise ValueError(f"{label}: missing key {key!r}")
    if not isinstance(config["name"], str) or not config["name"]:
        raise ValueError(f"{label}: name must be a non-empty string, got {config['name']!r}")
    label = f"stage {index} ({config['name']!r})"
    window, window_rule = _stage_window(label, config, budget, min_window)
    if "skills" not in config and "instructions" not in config:
        raise ValueError(f"{label}: give 'skills', 'instructions' or both")
    for key, example in (("skills", '["reach"]'), ("instructions", '["pick up the red block"]')):
        value = config.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError(f"{label}: {key} must be a list of strings, e.g. {key} = {example}")
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
            window,
            config["threshold"],
            window_rule,
        )
    except ValueError as error:
        raise ValueError(f"{label}: {error}") from None


class HandCurriculum(Curriculum):
    """Stages in a fixed order; a stage ends when its success rate over a window is high enough.

    Within a stage tasks are sampled uniformly; with probability `review` a task of an earlier
    stage is practised instead, so mastered skills are not forgotten. Only outcomes of the current
    stage's tasks fill its window (the learner's attempts and, through `update_evaluation`, its
    evaluation episodes alike); the last stage never ends (`mastered` says when its rule holds).
    A stage's window is a number of outcomes, or in the TOML a share of the run's budget (the
    outcomes the run will report), so that it can fill within a short run. A saved state keeps
    the windows it was saved with: a run resumed with a larger budget (more iterations) goes on
    with the windows it started with, so its stages advance as they would have, and once the
    last stage is reached the added budget is spent on it.
    """

    name = "hand"
    settings = ("hand_curriculum",)
    reads_budget = True

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
        self.path: Path | None = None
        """the stages file it was read from (None: built from stages or a parsed config)"""

    @classmethod
    def from_toml(
        cls,
        path: str | Path = HAND_CURRICULUM_TOML,
        colours: int | Sequence[str] = 3,
        seed: int | None = 0,
        budget: int | None = None,
    ) -> HandCurriculum:
        """Read stages from a TOML file (see hand_curriculum.toml), raising ValueError if bad.

        `budget`: the outcomes the run will report; stages that give `window_share` need it.
        """
        try:
            data = Path(path).read_bytes()
        except OSError as error:
            raise ValueError(f"{path}: cannot be read ({error.strerror or error})") from None
        try:
            text = data.removeprefix(b"\xef\xbb\xbf").decode()  # a BOM, as some editors save
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}: not UTF-8 text ({error}); save it as UTF-8") from None
        try:
            config = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path}: not valid TOML: {error}") from None
        try:
            curriculum = cls.from_config(config, colours, seed, budget)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        curriculum.path = Path(path)
        return curriculum

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        colours: int | Sequence[str] = 3,
        seed: int | None = 0,
        budget: int | None = None,
    ) -> HandCurriculum:
        """Build from the parsed TOML document: optional `review` and `min_window`, a list of
        `stage` tables. A stage's `window_share` becomes a window of
        max(min_window, round(window_share * budget)) outcomes (ValueError without a budget)."""
        unknown = set(config) - _TOP_KEYS
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}; accepted keys: {sorted(_TOP_KEYS)}")
        _check_budget(budget)
        stages = config.get("stage")
        if not isinstance(stages, list) or not stages:
            raise ValueError("missing key 'stage': give at least one [[stage]] table")
        min_window = config.get("min_window", DEFAULT_MIN_WINDOW)
        if isinstance(min_window, bool) or not isinstance(min_window, int) or min_window < 1:
            raise ValueError(f"min_window must be a positive integer, got {min_window!r}")
        scene = scene_colours(colours)
        built = [
            _stage_from_config(i, stage, scene, budget, min_window)
            for i, stage in enumerate(stages)
        ]
        names = [stage.name for stage in built]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"stage names must differ; {', '.join(map(repr, repeated))} repeats")
        review = config.get("review", 0.1)
        if isinstance(review, bool) or not isinstance(review, (int, float)):
            raise ValueError(f"review must be a number in [0, 1], got {review!r}")
        return cls(built, seed, review)

    @classmethod
    def build(
        cls,
        tasks: Sequence[str] | None,
        seed: int | None = 0,
        *,
        budget: int | None = None,
        target_skills: Sequence[str] | None = None,
        path: str | Path = HAND_CURRICULUM_TOML,
        colours: int | Sequence[str] = 3,
    ) -> HandCurriculum:
        """Load the stages and check the target env accepts every task they may propose."""
        curriculum = cls.from_toml(path, colours, seed, budget)
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

    @classmethod
    def setup_options(cls, setup: CurriculumSetup) -> dict[str, Any]:
        """The stages file (`hand_path`, default the shipped one) and the env's colours."""
        path = Path(setup.hand_path) if setup.hand_path else HAND_CURRICULUM_TOML
        if not path.is_file():
            where = "" if path.is_absolute() else f" (relative to the current folder, {Path.cwd()})"
            raise ValueError(f"hand_curriculum: no file at {path}{where}")
        return {"path": path, "colours": setup.colours}

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
        return full and sum(self.window) / stage.window >= stage.threshold

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
            "windows": [stage.window for stage in self.stages],
            "stages": self._stages_saved(),
            "rng": self._rng_state(),
        }

    def _stages_saved(self) -> list[list[Any]]:
        """What a resume must find unchanged: each stage's name, tasks, threshold and window rule,
        then the review rate (a window_share's window may differ with the budget: the windows
        themselves are restored from `windows`)."""
        stages = [
            [stage.name, list(stage.tasks), stage.threshold, stage.window_rule]
            for stage in self.stages
        ]
        return [*stages, [self.review]]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the stage, its window, the random generator and the saved stage windows."""
        _check_state(state, self.name, self.tasks)
        if not 0 <= int(state["stage"]) < len(self.stages):
            raise ValueError(f"state stage {state['stage']} is not one of {len(self.stages)}")
        saved = state.get("stages")  # None in a state saved before the stages were kept
        mine = self._stages_saved()
        if saved and all(len(entry) == 3 for entry in saved[:-1]):  # saved before window rules
            mine = [entry[:3] for entry in mine[:-1]] + mine[-1:]
        if saved is not None and saved != mine:
            raise CurriculumChanged(
                "the hand curriculum's stages (names, tasks, windows, thresholds or review rate) "
                "differ from those the run was saved with: its stages file changed, or another "
                "was given; give that one back to resume, or start a new run"
            )
        windows = list(state.get("windows", [stage.window for stage in self.stages]))
        if len(windows) != len(self.stages):
            raise CurriculumChanged(
                f"state was saved with {plural(len(windows), 'stage window')} {windows}, this "
                f"hand curriculum has {plural(len(self.stages), 'stage')}"
            )
        self.stages = tuple(
            replace(stage, window=window)
            for stage, window in zip(self.stages, windows, strict=True)
        )
        self.stage = int(state["stage"])
        self.window = [bool(success) for success in state["window"]]
        self._load_rng_state(state["rng"])

    def brief(self) -> dict[str, Any]:
        return {"stage": self.stage_name, "stage_index": self.stage, "mastered": self.mastered}

    def budget_warning(self, outcomes: int) -> str | None:
        """The first stage short of the last whose window cannot fill within `outcomes` more
        outcomes, the windows before it filling first: the curriculum never leaves it, so the
        stages after it are never practised (None if each can be left)."""
        needed = -len(self.window)
        for index in range(self.stage, len(self.stages) - 1):
            stage = self.stages[index]
            needed += stage.window
            if needed <= outcomes:
                continue
            later = [repr(s.name) for s in self.stages[index + 1 :]]
            never = f"stage {later[0]} is" if len(later) == 1 else f"stages {', '.join(later)} are"
            more = plural(needed, "more outcome")
            if index == self.stage:
                windows = f"its window needs {more} of its tasks"
            else:
                windows = f"its window and those of the stages before it need {more} of their tasks"
            where = f" in {self.path}" if self.path is not None else ""
            return (
                f"hand curriculum stage {stage.name!r} ({stage.window_rule}) can never end, so "
                f"{never} never practised: {windows}, more than the {outcomes} the run has "
                f"left to report to the curriculum; give smaller windows{where} (window, or "
                "window_share and min_window)"
            )
        return None

    def scalars(self) -> dict[str, float]:
        return {"curriculum/stage": float(self.stage)}


class LearningProgressCurriculum(Curriculum):
    """Samples tasks whose success rate is changing: learning progress = |fast EMA - slow EMA|.

    Each group keeps a fast and a slow exponential moving average of its success, both set to the
    first outcome. Their gap is large while success rises (or falls: forgetting) and vanishes once
    it is flat, at 0 or at 1. With probability 1 - explore a group is drawn in proportion to its
    progress (uniformly if no group shows any), otherwise uniformly; then a task of the group,
    uniformly. With `group="task"` (the default) each task is its own group. With
    `group="skill"` the tasks of a skill share one pair of EMAs: a short run (~60 outcomes over
    ~60 tasks) moves per-task EMAs barely at all, per-skill ones react within it. References:
    Matiisen et al. 2017, "Teacher-student curriculum learning"; Portelas et al. 2020, ALP-GMM;
    Kanitscheider et al. 2021, "Multi-task curriculum learning in a complex, visual,
    hard-exploration domain: Minecraft", whose fast/slow EMA estimate this follows.
    """

    name = "lp"

    def __init__(
        self,
        tasks: Sequence[str],
        seed: int | None = 0,
        fast: float = 0.1,
        slow: float = 0.01,
        explore: float = 0.2,
        group: str = "task",
    ) -> None:
        super().__init__(seed)
        if not 0.0 < slow < fast <= 1.0:
            raise ValueError(f"EMA rates must satisfy 0 < slow < fast <= 1, got {slow}, {fast}")
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore must be in [0, 1], got {explore}")
        if group not in LP_GROUPS:
            raise ValueError(f"unknown lp group {group!r}; accepted: {', '.join(LP_GROUPS)}")
        self.tasks = _canonical_tasks(tasks)
        self.fast_rate, self.slow_rate, self.explore = float(fast), float(slow), float(explore)
        self.group = group
        keys = self.tasks if group == "task" else tuple(parse(t).skill for t in self.tasks)
        self.groups: tuple[str, ...] = tuple(dict.fromkeys(keys))
        """What the EMAs are kept for, in order: the tasks, or the skills of the tasks."""
        position = {key: i for i, key in enumerate(self.groups)}
        self._group_of = np.array([position[key] for key in keys], dtype=int)
        self._group_size = np.bincount(self._group_of, minlength=len(self.groups))
        self._index = {task: int(self._group_of[i]) for i, task in enumerate(self.tasks)}
        self.fast = [0.0] * len(self.groups)
        self.slow = [0.0] * len(self.groups)
        self.seen = [False] * len(self.groups)

    @classmethod
    def setup_options(cls, setup: CurriculumSetup) -> dict[str, Any]:
        """The caller's `group`, if it gives one."""
        return {} if setup.group is None else {"group": setup.group}

    def group_progress(self) -> np.ndarray:
        """Learning progress of every group (task or skill), in `groups` order."""
        return np.abs(np.asarray(self.fast) - np.asarray(self.slow))

    def progress(self) -> np.ndarray:
        """Learning progress of every task, in task order (its group's, with group="skill")."""
        return self.group_progress()[self._group_of]

    def skill_progress(self) -> dict[str, float]:
        """Learning progress of each skill (the mean over its tasks; the skill's own with
        group="skill")."""
        totals: dict[str, list[float]] = {}
        for task, value in zip(self.tasks, self.progress(), strict=True):
            totals.setdefault(parse(task).skill, []).append(float(value))
        return {skill: sum(values) / len(values) for skill, values in totals.items()}

    def probabilities(self) -> np.ndarray:
        """Sampling probability of every task, in task order."""
        k = len(self.groups)
        progress = self.group_progress()
        total = progress.sum()
        focus = progress / total if total > 0 else np.full(k, 1.0 / k)
        per_group = (1.0 - self.explore) * focus + self.explore / k
        return per_group[self._group_of] / self._group_size[self._group_of]

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

    def brief(self) -> dict[str, Any]:
        brief: dict[str, Any] = {"skill_probabilities": skill_probabilities(self)}
        if self.group == "skill":
            brief["skill_progress"] = self.skill_progress()
        return brief

    def scalars(self) -> dict[str, float]:
        return {f"curriculum/p_{s}": p for s, p in skill_probabilities(self).items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tasks": list(self.tasks),
            "group": self.group,
            "rates": [self.fast_rate, self.slow_rate, self.explore],
            "fast": list(self.fast),
            "slow": list(self.slow),
            "seen": list(self.seen),
            "rng": self._rng_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _check_state(state, self.name, self.tasks)
        group = state.get("group", "task")
        if group != self.group:
            raise ValueError(
                f"state keeps progress per {group}, this lp curriculum per {self.group}"
            )
        rates = [self.fast_rate, self.slow_rate, self.explore]
        saved = state.get("rates")  # None in a state saved before the rates were kept
        if saved is not None and [float(rate) for rate in saved] != rates:
            raise CurriculumChanged(
                f"state was saved with fast, slow and explore rates {saved}, this lp curriculum "
                f"has {rates}: give those back to resume, or start a new run"
            )
        if not len(state["fast"]) == len(state["slow"]) == len(state["seen"]) == len(self.groups):
            raise ValueError(
                f"state has EMAs of another number of {group}s than {len(self.groups)}"
            )
        self.fast = [float(value) for value in state["fast"]]
        self.slow = [float(value) for value in state["slow"]]
        self.seen = [bool(value) for value in state["seen"]]
        self._load_rng_state(state["rng"])


# -- controls: sanity checks of the harness itself ---------------------------------------------


def target_chain(target_skills: Sequence[str] | str | None) -> tuple[str, ...]:
    """The prerequisite chain of the target skills (e.g. tower: lift, stack, tower), in the order
    of `language.SKILLS`, which puts every prerequisite before what needs it."""
    if target_skills is None:
        raise ValueError("the controls need target_skills, e.g. ('tower',)")
    targets = (target_skills,) if isinstance(target_skills, str) else tuple(target_skills)
    if not targets:
        raise ValueError(f"target_skills is empty; accepted skills: {', '.join(SKILLS)}")
    for skill in targets:
        if skill not in PREREQUISITES:
            raise ValueError(
                f"unknown target skill {skill!r}; accepted skills: {', '.join(PREREQUISITES)}"
            )
    needed = {s for skill in targets for s in PREREQUISITES[skill]}
    return tuple(skill for skill in SKILLS if skill in needed)


def tasks_by_skill(tasks: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Tasks grouped by their grammar skill, in order of first appearance."""
    grouped: dict[str, list[str]] = {}
    for task in tasks:
        grouped.setdefault(parse(task).skill, []).append(task)
    return {skill: tuple(group) for skill, group in grouped.items()}


class _ControlCurriculum(Curriculum):
    """What both controls share: target skills, the full task set, their practice subset."""

    def __init__(
        self, tasks: Sequence[str], target_skills: Sequence[str] | str, seed: int | None = 0
    ) -> None:
        super().__init__(seed)
        self.tasks = _canonical_tasks(tasks)
        self.chain = target_chain(target_skills)
        targets = (target_skills,) if isinstance(target_skills, str) else tuple(target_skills)
        self.target_skills = tuple(dict.fromkeys(targets))
        self.by_skill = tasks_by_skill(self.tasks)

    @classmethod
    def build(
        cls,
        tasks: Sequence[str] | None,
        seed: int | None = 0,
        *,
        budget: int | None = None,
        target_skills: Sequence[str] | None = None,
        **options: Any,
    ) -> Curriculum:
        if tasks is None:
            raise ValueError(f"the {cls.name} curriculum needs tasks, e.g. task_set(env_id)")
        if target_skills is None:
            raise ValueError(f"the {cls.name} curriculum needs target_skills, e.g. ('tower',)")
        return cls(tasks, target_skills, seed, **options)

    def update(self, instruction: str, success: bool, episode_return: float) -> None:
        canonical(instruction)

    def _base_state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tasks": list(self.tasks),
            "target_skills": list(self.target_skills),
            "rng": self._rng_state(),
        }

    def _load_base_state(self, state: Mapping[str, Any]) -> None:
        _check_state(state, self.name, self.tasks)
        if list(state.get("target_skills", [])) != list(self.target_skills):
            raise ValueError(
                f"state was saved for target skills {state.get('target_skills')}, this "
                f"{self.name} curriculum's are {list(self.target_skills)}"
            )
        self._load_rng_state(state["rng"])


class PositiveControl(_ControlCurriculum):
    """Privileged control: practises what the target needs next, read from the evaluations.

    It knows the target skills' prerequisite chain (`PREREQUISITES`, e.g. tower: lift -> stack ->
    tower) and the learner's latest evaluated success per skill (`update_evaluation`; its own
    practice attempts are not read). It practises the weakest prerequisite: of the chain skills
    below `mastery`, the one with the lowest evaluated success (a skill not yet evaluated lowest
    of all; ties go to the earlier skill of the chain); once all are mastered, the chain skill
    with the lowest rate. Tasks of that skill are drawn uniformly. With a weak learner (lift
    0.5, stack 0, tower 0) it practises stack rather than polishing lift first. A
    curriculum that cannot beat it has nothing to gain from knowing the learner; one that does
    worse than `fixed` under it points at the harness, not the curriculum.
    """

    name = "positive_control"

    def __init__(
        self,
        tasks: Sequence[str],
        target_skills: Sequence[str] | str,
        seed: int | None = 0,
        mastery: float = 0.8,
    ) -> None:
        super().__init__(tasks, target_skills, seed)
        if isinstance(mastery, bool) or not 0.0 <= mastery <= 1.0:
            raise ValueError(f"mastery must be in [0, 1], got {mastery}")
        self.mastery = float(mastery)
        missing = [skill for skill in self.chain if skill not in self.by_skill]
        if missing:
            raise ValueError(
                f"positive_control needs tasks of {', '.join(missing)} (the chain of "
                f"{', '.join(self.target_skills)}: {' -> '.join(self.chain)}); practise on an env "
                "that has them (GameOn/MultiSkill-v0 has every skill)"
            )
        self.rates: dict[str, float] = {}
        """The latest evaluated success rate of each skill evaluated so far."""

    @property
    def skill(self) -> str:
        """The skill practised now (min keeps the earliest of equal rates)."""
        rates = {skill: self.rates.get(skill, -1.0) for skill in self.chain}
        learning = [skill for skill in self.chain if rates[skill] < self.mastery]
        return min(learning or self.chain, key=lambda skill: rates[skill])

    def propose(self) -> str:
        tasks = self.by_skill[self.skill]
        return tasks[int(self.rng.integers(len(tasks)))]

    def update_evaluation(self, outcomes: Sequence[Outcome]) -> None:
        """Replace the rate of each skill evaluated in `outcomes` with its success there (any
        instruction that parses counts for its skill, the suite's tasks need not be ours)."""
        episodes: dict[str, list[bool]] = {}
        for outcome in outcomes:
            episodes.setdefault(parse(outcome.instruction).skill, []).append(bool(outcome.success))
        for skill, successes in episodes.items():
            self.rates[skill] = sum(successes) / len(successes)

    def brief(self) -> dict[str, Any]:
        return {"skill": self.skill, "chain": list(self.chain), "rates": dict(self.rates)}

    def scalars(self) -> dict[str, float]:
        return {"curriculum/chain_step": float(self.chain.index(self.skill))}

    def state_dict(self) -> dict[str, Any]:
        return {**self._base_state(), "mastery": self.mastery, "rates": dict(self.rates)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the rates and the random generator; a state saved with another `mastery`
        is refused, as another target's is: it would practise other skills than the saved run."""
        saved = state.get("mastery", self.mastery)
        if saved != self.mastery:
            raise ValueError(
                f"state was saved with mastery {saved}, this positive_control's is {self.mastery}"
            )
        self._load_base_state(state)
        self.rates = {str(skill): float(rate) for skill, rate in state["rates"].items()}


class NegativeControl(_ControlCurriculum):
    """Control that spends the budget on what the target does not need: uniform over the tasks of
    `DISTRACTOR_SKILLS` (reach, push) outside the target's prerequisite chain, e.g. reach and
    push for a tower target. A curriculum no better than it has not shown that its choices
    matter. `tasks` stays the whole task set; `practice` is what it proposes."""

    name = "negative_control"
    practises_off_target = True

    def __init__(
        self, tasks: Sequence[str], target_skills: Sequence[str] | str, seed: int | None = 0
    ) -> None:
        super().__init__(tasks, target_skills, seed)
        self.skills = tuple(
            s for s in DISTRACTOR_SKILLS if s not in self.chain and s in self.by_skill
        )
        if not self.skills:
            raise ValueError(
                f"negative_control has no tasks left: the target {', '.join(self.target_skills)} "
                f"needs {', '.join(self.chain)}, and the tasks have no other skill of "
                f"{', '.join(DISTRACTOR_SKILLS)}"
            )
        self.practice = tuple(task for s in self.skills for task in self.by_skill[s])

    def propose(self) -> str:
        return self.practice[int(self.rng.integers(len(self.practice)))]

    def brief(self) -> dict[str, Any]:
        return {"skills": list(self.skills), "tasks": len(self.practice)}

    def state_dict(self) -> dict[str, Any]:
        return self._base_state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._load_base_state(state)


# -- helpers for learners that train under a curriculum ---------------------------------------


def episode_budget(
    env_id: str, total_steps: int, num_envs: int = 1, max_episode_steps: int | None = None
) -> int:
    """A lower bound on the training episodes an online run finishes (at least 1).

    Each of `num_envs` envs runs total_steps // num_envs steps and every episode ends by the step
    limit (`max_episode_steps`, or the env's own), so at least that many episodes end per env;
    episodes that end early (at success) only add to them.
    """
    if env_id not in ENV_SKILLS:
        raise ValueError(f"unknown env id {env_id!r}; accepted: {', '.join(ENV_IDS)}")
    limit = max_episode_steps or ENV_SKILLS[env_id][1]
    envs = max(1, int(num_envs))
    return max(1, envs * ((int(total_steps) // envs) // int(limit)))


def skill_probabilities(curriculum: LearningProgressCurriculum) -> dict[str, float]:
    """The lp curriculum's sampling probability of each skill (summed over its instructions)."""
    totals: dict[str, float] = {}
    for task, probability in zip(curriculum.tasks, curriculum.probabilities(), strict=True):
        skill = parse(task).skill
        totals[skill] = totals.get(skill, 0.0) + float(probability)
    return totals


def curriculum_brief(curriculum: Curriculum) -> dict:
    """A short, JSON-ready form of a curriculum's state for the summary (`brief()`)."""
    return curriculum.brief()


def vlm_usage(curriculum: Curriculum) -> dict[str, Any]:
    """What the curriculum asked of a VLM: calls, tokens, cost, fallbacks (zeros if no model)."""
    return curriculum.usage()


def curriculum_label(curriculum: Curriculum) -> str:
    """How results are labelled: the name, or for vlm its backend and model ("vlm[rules]")."""
    return curriculum.label


def curriculum_scalars(curriculum: Curriculum) -> dict[str, float]:
    """What to plot over training: hand's stage index; lp's sampling probability per skill;
    vlm's calls and fallbacks; the positive control's step along its chain (`scalars()`)."""
    return curriculum.scalars()


def save_curriculum(path: Path, curriculum: Curriculum) -> None:
    """Write the curriculum's state_dict as JSON atomically (load it with load_state_dict)."""
    atomic_write(path, json.dumps(curriculum.state_dict()))
