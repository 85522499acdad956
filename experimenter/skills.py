"""The skill library: named skills the embodiment can run, described for the VLM.

A skill is an instruction template, a description (what it does, when it applies) and an
executor that turns one instruction into actions:

- `ScriptedExecutor(noise)`: the scripted expert of `envs.experts` for the skill;
- `LearnedExecutor(checkpoint)`: a language-conditioned policy saved by a baseline (torch is
  imported only when such a skill first runs, so scripted libraries work without it);
- `MacroExecutor(steps)`: a verified sequence of other skills' instructions;
- `CodedExecutor(source)`: a skill written as Python code against `experimenter/coded_api.py`
  (by the VLM's fast agent, RL-GPT style), run in the sandbox of `experimenter/sandbox.py`; it
  joins a library only after the oracle verified it on seeded trials (`verification`).

Skills with a scripted, learned or coded executor are named after a skill of the instruction grammar
("reach" ... "tower"): the embodiment runs an instruction with the executor of its skill. Macros
may have any name. A macro's template and steps use numbered slots, `{0}`, `{1}`, ..., bound to
the blocks of the instruction it matches: the macro "tower" with template
"build a tower of {0}, {1} and {2} from the bottom up" and steps
"stack the {1} block on the {0} block", "stack the {2} block on the {1} block" matches every
three-block tower. A template without slots matches exactly one instruction.

`decompose(instruction)` turns a task into the instructions the embodiment runs one after the
other, in one episode: a matching macro expands to its steps (the latest added macro wins, and a
macro is not expanded again inside its own expansion), a tower becomes the stacks that build it
from the bottom up, and any other instruction is run as it is. With `atomic=True` a tower whose
skill has its own executor (the scripted tower expert) runs whole instead.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gameon.atomic import atomic_write
from gameon.envs import language, oracle
from gameon.envs.experts import make_expert
from gameon.envs.language import COLOURS, SKILLS, Instruction, parse
from gameon.evaluation import Policy
from gameon.experimenter.coded_api import scene_message
from gameon.experimenter.sandbox import SandboxedSkill, SkillRejected

LIBRARY_FORMAT = "gameon-skill-library-v1"
EXECUTOR_KINDS = ("scripted", "learned", "macro", "coded")


@dataclass(frozen=True)
class ScriptedExecutor:
    """Runs the scripted expert of `envs.experts`, with optional Gaussian action noise."""

    noise: float = 0.0
    kind: ClassVar[str] = "scripted"

    def __post_init__(self) -> None:
        if isinstance(self.noise, bool) or not isinstance(self.noise, (int, float)):
            raise ValueError(f"scripted executor noise must be a number >= 0, got {self.noise!r}")
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"scripted executor noise must be a number >= 0, got {self.noise}")

    def policy(self, env: Any, instruction: Instruction, seed: int | None = None) -> Policy:
        """Start the expert on the env's active instruction (which must be `instruction`)."""
        expert = make_expert(env, float(self.noise), seed)
        if expert.env.instruction != instruction:
            raise ValueError(
                f"the env's active instruction is {expert.env.instruction}, not {instruction}; "
                "switch the env to the instruction before starting its expert"
            )
        expert.reset()
        return expert.act

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "noise": float(self.noise)}


@dataclass
class LearnedExecutor:
    """Runs a baseline's saved language-conditioned actor, loaded on first use."""

    checkpoint: str
    kind: ClassVar[str] = "learned"
    _actor: Any = field(default=None, init=False, repr=False, compare=False)
    _normalizer: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.checkpoint, (str, Path)) or not str(self.checkpoint):
            raise ValueError(f"checkpoint must be a file path, got {self.checkpoint!r}")
        self.checkpoint = str(self.checkpoint)

    def load(self) -> Policy:
        """Load the checkpoint once (ValueError if missing or corrupt); return a fresh policy.

        Each call returns a policy of its own, since an action-chunking policy keeps the chunks
        it predicted: every skill run starts with an empty buffer.
        """
        try:
            from gameon.policy import load_checkpoint, make_policy
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                f"learned skills need torch ({error}); install gameon-rl[train]"
            ) from None
        if self._actor is None:
            self._actor, self._normalizer, _ = load_checkpoint(self.checkpoint)
        return make_policy(self._actor, self._normalizer)

    def policy(self, env: Any, instruction: Instruction, seed: int | None = None) -> Policy:
        """The actor conditioned on `instruction` (its goal replaces the observation's)."""
        policy = self.load()
        from gameon.policy import flat_size

        space = getattr(env, "observation_space", None)
        if space is not None and "state" in space.spaces:
            size = flat_size(space)
            if size != self._actor.obs_size:
                raise ValueError(
                    f"checkpoint {self.checkpoint} expects observations of size "
                    f"{self._actor.obs_size}; this env gives {size}"
                )
        goal = language.encode(instruction)
        return lambda observation: policy({**observation, "goal": goal})

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "checkpoint": self.checkpoint}


@dataclass(frozen=True)
class MacroExecutor:
    """A sequence of other skills' instructions, with `{i}` slots for the task's blocks."""

    steps: tuple[str, ...]
    kind: ClassVar[str] = "macro"

    def __post_init__(self) -> None:
        if isinstance(self.steps, str) or not all(isinstance(s, str) for s in self.steps):
            raise ValueError(f"macro steps must be a list of instruction texts, got {self.steps!r}")
        object.__setattr__(self, "steps", tuple(self.steps))
        if not self.steps:
            raise ValueError("a macro needs at least one step")

    def policy(self, env: Any, instruction: Instruction, seed: int | None = None) -> Policy:
        """Macros have no policy of their own: the embodiment runs their steps."""
        raise ValueError(
            f"a macro runs as its steps ({'; '.join(self.steps)}); "
            "decompose the instruction with SkillLibrary.decompose first"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "steps": list(self.steps)}


@dataclass(frozen=True)
class CodedExecutor:
    """Runs a coded skill's source in the sandbox, one process per skill run.

    `verification` holds the oracle's trials that admitted it (trials, successes, the transcript
    reference). A skill the sandbox rejects (bad code, a crash, a limit, a garbage action) holds
    still for the rest of its budget, so the oracle judges it failed and the episode goes on;
    the reason is logged and kept in `rejections`.
    """

    source: str
    verification: Mapping[str, Any] | None = None
    kind: ClassVar[str] = "coded"
    rejections: list[str] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("a coded executor needs its Python source as a non-empty string")

    def policy(self, env: Any, instruction: Instruction, seed: int | None = None) -> Policy:
        """A sandboxed run of the source on `instruction`'s blocks (it starts on the first step)."""
        return CodedPolicy(self, env, instruction)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "verification": self.verification}


class CodedPolicy:
    """`observation -> action` of one coded-skill run: sends the env's scene to the sandboxed
    skill, returns its action; once the skill has returned or was rejected, it holds still
    (zero velocities, the gripper as last commanded). `close()` ends the child process."""

    def __init__(self, executor: CodedExecutor, env: Any, instruction: Instruction) -> None:
        self.executor, self.env = executor, env
        self.skill = SandboxedSkill(
            executor.source, list(instruction.objects), relation=instruction.relation
        )
        holding = any(block["grasped"] for block in scene_message(env)["blocks"].values())
        self.hold = np.array([0, 0, 0, 0, 1.0 if holding else -1.0], np.float32)
        self.finished = False

    def __call__(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        if self.finished:
            return self.hold.copy()
        try:
            action = self.skill.act(scene_message(self.env))
        except SkillRejected as rejected:
            self.executor.rejections.append(rejected.reason)
            action = None
        if action is None:
            self.finished = True
            self.skill.close()
            return self.hold.copy()
        self.hold[4] = action[4]
        return np.asarray(action, np.float32)

    def close(self) -> None:
        """Stop the sandboxed process if it still runs."""
        self.finished = True
        self.skill.close()


Executor = ScriptedExecutor | LearnedExecutor | MacroExecutor | CodedExecutor


def executor_from_dict(data: Mapping[str, Any]) -> Executor:
    """Rebuild an executor from `to_dict`'s form, naming the accepted kinds if it is unknown."""
    if not isinstance(data, Mapping):
        raise ValueError(f"an executor must be an object with a 'kind', got {data!r}")
    kind = data.get("kind")
    fields = {
        "scripted": {"noise"},
        "learned": {"checkpoint"},
        "macro": {"steps"},
        "coded": {"source", "verification"},
    }
    if kind not in fields:
        raise ValueError(f"unknown executor kind {kind!r}; accepted: {', '.join(EXECUTOR_KINDS)}")
    given = set(data) - {"kind"}
    if not given <= fields[kind] or (kind != "scripted" and given != fields[kind]):
        raise ValueError(
            f"a {kind} executor takes exactly the keys {sorted(fields[kind])}, got {sorted(given)}"
        )
    if kind == "scripted":
        return ScriptedExecutor(data.get("noise", 0.0))
    if kind == "learned":
        return LearnedExecutor(data["checkpoint"])
    if kind == "coded":
        return CodedExecutor(data["source"], data["verification"])
    return MacroExecutor(tuple(data["steps"]))


def _slots(template: str) -> set[int]:
    """The numbered slots `{i}` (i below the number of colours) of a macro text, ValueError for
    any other replacement field, so formatting it with the colours cannot fail."""
    try:
        fields = [
            (name, spec, conversion)
            for _, name, spec, conversion in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as error:
        raise ValueError(f"malformed template {template!r}: {error}") from None
    plain = all(
        name.isascii() and name.isdigit() and not spec and not conversion
        for name, spec, conversion in fields
    )
    if not plain or any(int(name) >= len(COLOURS) for name, _, _ in fields):
        raise ValueError(
            f"template {template!r} may only use plain numbered slots {{0}} .. "
            f"{{{len(COLOURS) - 1}}} for blocks"
        )
    return {int(name) for name, _, _ in fields}


@dataclass(frozen=True)
class Skill:
    """A named skill: instruction template, description for the VLM, and how to execute it."""

    name: str
    template: str
    description: str
    executor: Executor

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise ValueError(f"a skill name must be a non-empty word, got {self.name!r}")
        for key in ("template", "description"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"skill {self.name!r} needs a non-empty {key}")
        if not isinstance(
            self.executor, (ScriptedExecutor, LearnedExecutor, MacroExecutor, CodedExecutor)
        ):
            raise ValueError(
                f"skill {self.name!r}: executor must be one of ScriptedExecutor, "
                f"LearnedExecutor, MacroExecutor, CodedExecutor, got {type(self.executor).__name__}"
            )
        if self.is_macro:
            self._check_macro()
        elif self.name not in SKILLS:
            raise ValueError(
                f"a {self.executor.kind} skill runs instructions of a grammar skill and must be "
                f"named after it ({', '.join(SKILLS)}), got {self.name!r}; "
                "sequences of skills are macros"
            )

    @property
    def is_macro(self) -> bool:
        return isinstance(self.executor, MacroExecutor)

    @property
    def blocks(self) -> int:
        """How many blocks a macro's template names ({0} .. {n-1}); 0 for other skills."""
        return len(_slots(self.template)) if self.is_macro else 0

    @property
    def steps(self) -> tuple[str, ...]:
        """A macro's step templates; empty for a skill with its own policy."""
        return self.executor.steps if isinstance(self.executor, MacroExecutor) else ()

    def _check_macro(self) -> None:
        """Every step must be bound by the template's slots and parse once bound, and the
        template's slots must name its blocks in order, else `bind` could never match it."""
        slots = _slots(self.template)
        if slots != set(range(len(slots))):
            raise ValueError(f"macro {self.name!r}: template slots must be {{0}} .. {{n-1}}")
        colours = COLOURS[: len(slots)]
        for text in (self.template, *self.steps):
            unbound = _slots(text) - slots
            if unbound:
                raise ValueError(
                    f"macro {self.name!r}: {text!r} uses slots {sorted(unbound)} "
                    f"that its template {self.template!r} does not bind"
                )
            try:
                parse(text.format(*colours))
            except ValueError as error:
                raise ValueError(
                    f"macro {self.name!r}: {text!r} is not an instruction: {error}"
                ) from None
        if parse(self.template.format(*colours)).objects[: len(slots)] != colours:
            raise ValueError(
                f"macro {self.name!r}: template {self.template!r} must number its blocks in "
                "the order the instruction names them, {0} first, then {1}, ..."
            )

    def bind(self, instruction: Instruction) -> list[Instruction] | None:
        """A macro's steps for `instruction` if its template matches it, else None."""
        if not self.is_macro:
            return None
        slots = self.blocks
        if slots > len(instruction.objects):
            return None
        colours = instruction.objects[:slots]
        try:
            if parse(self.template.format(*colours)) != instruction:
                return None
            return [parse(step.format(*colours)) for step in self.steps]
        except ValueError:
            return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "template": self.template,
            "description": self.description,
            "executor": self.executor.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Skill:
        keys = {"name", "template", "description", "executor"}
        if not isinstance(data, Mapping) or set(data) != keys:
            got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"a skill needs exactly the keys {sorted(keys)}, got {got}")
        return cls(
            data["name"],
            data["template"],
            data["description"],
            executor_from_dict(data["executor"]),
        )


def as_instruction(task: str | Instruction) -> Instruction:
    """The Instruction of a task given as text (parsed) or already as an Instruction."""
    if isinstance(task, Instruction):
        return task
    if isinstance(task, str):
        return parse(task)
    raise ValueError(f"a task must be instruction text or an Instruction, got {task!r}")


class SkillLibrary:
    """Named skills, listed for the VLM, extended at run time, saved and loaded as JSON."""

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        self._skills: dict[str, Skill] = {}
        for skill in skills:
            self.add(skill)

    def add(self, skill: Skill, replace: bool = False) -> None:
        """Add a skill; a name already taken is an error unless `replace`."""
        if not isinstance(skill, Skill):
            raise ValueError(f"add takes a Skill, got {type(skill).__name__}")
        if skill.name in self._skills and not replace:
            raise ValueError(f"the library already has a skill {skill.name!r}; pass replace=True")
        self._skills.pop(skill.name, None)
        self._skills[skill.name] = skill

    def remove(self, name: str) -> Skill:
        """Take a skill out of the library (e.g. a macro that failed verification); return it."""
        skill = self.get(name)
        del self._skills[name]
        return skill

    def get(self, name: str) -> Skill:
        """The skill of this name; ValueError naming the known skills if there is none."""
        try:
            return self._skills[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"no skill {name!r} in the library; known skills: {', '.join(self._skills)}"
            ) from None

    def names(self) -> list[str]:
        return list(self._skills)

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __iter__(self) -> Iterator[Skill]:
        return iter(list(self._skills.values()))

    def __len__(self) -> int:
        return len(self._skills)

    def replace_executor(self, name: str, executor: Executor) -> Skill:
        """Give a skill a new executor (e.g. a learned policy that passed its threshold)."""
        skill = replace(self.get(name), executor=executor)
        self._skills[name] = skill
        return skill

    def describe(self) -> str:
        """A text listing of every skill for the VLM's prompt: name, how it runs, template, use."""
        lines = []
        for skill in self._skills.values():
            how = skill.executor.kind
            if skill.is_macro:
                how += ": " + "; then ".join(skill.steps)
            lines.append(f"- {skill.name} [{how}]\n  template: {skill.template}")
            lines.append(f"  {skill.description}")
        return "\n".join(lines)

    def decompose(self, task: str | Instruction, atomic: bool = False) -> list[Instruction]:
        """The instructions to run one after the other for a task (see the module docstring)."""
        return self._expand(as_instruction(task), atomic, ())

    def _expand(
        self, instruction: Instruction, atomic: bool, active: tuple[str, ...]
    ) -> list[Instruction]:
        for skill in reversed(self._skills.values()):
            if skill.name in active:
                continue
            steps = skill.bind(instruction)
            if steps is not None:
                inner = (*active, skill.name)
                return [part for step in steps for part in self._expand(step, atomic, inner)]
        runnable = self._runnable(instruction.skill)
        if instruction.skill == "tower" and not (atomic and runnable):
            objects = instruction.objects
            stacks = [
                Instruction("stack", (top, below))
                for below, top in zip(objects, objects[1:], strict=False)
            ]
            return [part for step in stacks for part in self._expand(step, atomic, active)]
        self.executor_for(instruction)
        return [instruction]

    def _runnable(self, name: str) -> bool:
        return name in self._skills and not self._skills[name].is_macro

    def executor_for(self, instruction: Instruction) -> Executor:
        """The executor that runs one decomposed instruction (its skill's)."""
        if not self._runnable(instruction.skill):
            runnable = [s.name for s in self._skills.values() if not s.is_macro]
            raise ValueError(
                f"no skill in the library runs {instruction.skill!r} ({instruction}); "
                f"skills with an executor: {', '.join(runnable) or 'none'}"
            )
        return self._skills[instruction.skill].executor

    def to_dict(self) -> dict[str, Any]:
        return {"format": LIBRARY_FORMAT, "skills": [s.to_dict() for s in self._skills.values()]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SkillLibrary:
        if not isinstance(data, Mapping) or data.get("format") != LIBRARY_FORMAT:
            raise ValueError(f"not a skill library: expected {{'format': '{LIBRARY_FORMAT}', ...}}")
        skills = data.get("skills")
        if not isinstance(skills, list):
            raise ValueError("a skill library needs a 'skills' list")
        return cls(Skill.from_dict(skill) for skill in skills)

    def save(self, path: str | Path) -> Path:
        """Write the library as JSON atomically (a temporary file beside `path`, then a rename)."""
        return atomic_write(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> SkillLibrary:
        """Read a library saved by `save`; a missing or malformed file raises ValueError."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"no skill library at {path}")
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path} is not JSON: {error}") from None
        try:
            return cls.from_dict(data)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None


KEPT_EXECUTORS = ("macro", "coded")
"""Executor kinds a promotion never replaces: a macro runs its steps, a verified coded skill its
code."""


def promote_all(library: SkillLibrary, checkpoint: str) -> None:
    """Give every skill the learned policy of `checkpoint` (loaded once), but `KEPT_EXECUTORS`."""
    learned = LearnedExecutor(checkpoint)
    for skill in library:
        if skill.executor.kind not in KEPT_EXECUTORS:
            library.replace_executor(skill.name, learned)


def promote_by_rate(
    library: SkillLibrary,
    rates: Mapping[str, float],
    checkpoint: str,
    threshold: float,
    noise: float,
    verdicts: Mapping[str, str] | None = None,
) -> None:
    """Give each evaluated skill its executor for the next collection: the learned policy of
    `checkpoint` once its rate reaches `threshold`, else its scripted expert with `noise`. With
    `verdicts` (a curve analysis) a skill that passed moves to its learned policy only once
    judged "converged" and otherwise keeps its executor. `KEPT_EXECUTORS` keep theirs."""
    learned = LearnedExecutor(checkpoint)  # one executor: the checkpoint is loaded once
    for skill, rate in rates.items():
        if skill not in library or library.get(skill).executor.kind in KEPT_EXECUTORS:
            continue
        if rate < threshold:
            library.replace_executor(skill, ScriptedExecutor(noise))
        elif verdicts is None or verdicts.get(skill) == "converged":
            library.replace_executor(skill, learned)


def _descriptions() -> dict[str, str]:
    """What each grammar skill does and when it applies, with the oracle's thresholds."""
    cm = 100
    reach_low, reach_high = (round(z * cm) for z in oracle.REACH_Z_RANGE)
    near, far = (round(d * cm) for d in oracle.NEXT_TO_RANGE)
    stack_tol = round(oracle.STACK_XY_TOL * cm)
    return {
        "reach": (
            "move the open gripper over a block: within "
            f"{round(oracle.REACH_XY_TOL * cm)} cm of its centre horizontally and "
            f"{reach_low}-{reach_high} cm above its top face. Pre-condition: none."
        ),
        "lift": (
            "pick up a block: grasp it from above between both fingers and raise it so its "
            f"bottom face is at least {round(oracle.LIFT_HEIGHT * cm)} cm above the table. "
            "Pre-conditions: the gripper is empty and nothing is on the block."
        ),
        "push": (
            "slide a block along the table, without lifting it, at least "
            f"{round(oracle.PUSH_DISTANCE * cm)} cm to the left, right, forward or backward "
            f"(drifting at most {round(oracle.PUSH_LATERAL_TOL * cm)} cm sideways), then let go "
            "of it. Pre-conditions: the block lies on the table with room in that direction."
        ),
        "place": (
            "put a block down on the table beside another, "
            f"{near}-{far} cm from it on the named side (left of, right of, in front of, "
            f"behind) and within {round(oracle.NEXT_TO_LATERAL_TOL * cm)} cm across, released "
            "and at rest. Pre-conditions: the gripper is empty or holds the first block; "
            "both blocks can end on the table."
        ),
        "stack": (
            "put one block on top of another: the top block centred within "
            f"{stack_tol} cm over the bottom one, flat, at rest and released. Pre-conditions: "
            "nothing is on either block, and the gripper is empty or holds the top block."
        ),
        "unstack": (
            "take a block off the block it rests on and put it down on the table, apart from "
            "it, released and at rest. Pre-condition: the first block is on the second."
        ),
        "tower": (
            "build a tower: the first block on the table, each next block stacked on the one "
            "before, all at rest and the gripper clear. Decomposed into stacks from the bottom "
            "up unless run atomically. Pre-condition: nothing is on the named blocks."
        ),
    }


def default_library(noise: float = 0.0) -> SkillLibrary:
    """Every grammar skill with its scripted expert (Gaussian action noise `noise`)."""
    templates = language.canonical_templates()
    descriptions = _descriptions()
    executor = ScriptedExecutor(noise)
    return SkillLibrary(
        Skill(skill, templates[skill], descriptions[skill], executor) for skill in SKILLS
    )
