"""The experimenter's modules: one prompt each, answered as validated JSON through a Backend.

- `propose_tasks`: scene image + library + per-task and per-skill history -> next tasks;
- `decompose`: a task -> a sequence of steps (instruction texts for library skills);
- `retrieve`: a step -> a library skill: a step that parses runs as parsed; one that does not
  parse goes to text similarity (only misspelt words may differ), then the model; a step none
  of them matches, or one that parses but names a block the scene lacks or a skill the library
  cannot run, is reported as unmatched, never guessed;
- `analyse`: per-skill learning curves (a table and a plot image) -> improving, converged or
  stalled per skill;
- `propose_skill`: a new macro skill, which joins the library only after the oracle judges it
  successful over several seeded trials (`vlm.collect.verify_skill`);
- `decide_code_or_learn` (the slow agent, after RL-GPT): per skill, keep learning it, write it
  as code, or replace its stalled learning by code;
- `write_skill_code` (the fast agent): the Python source of a coded skill, which must pass the
  sandbox's check before it is accepted.

Answers are validated beyond their schema (instructions parse and are in the task set, skills
exist); an invalid answer is re-asked by `Backend.generate`, and one that stays invalid raises
VLMError, which the caller (the vlm curriculum) turns into a counted fallback.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gameon.envs.language import COLOURS, SKILLS, Instruction, all_instructions, parse
from gameon.experimenter.sandbox import SkillRejected, check_source
from gameon.experimenter.skills import MacroExecutor, Skill, SkillLibrary
from gameon.experimenter.vlm.backend import Backend, ImageLike
from gameon.experimenter.vlm.prompts import render_prompt
from gameon.plots import skill_curves_png

PREREQUISITES: dict[str, tuple[str, ...]] = {
    "reach": (),
    "lift": ("reach",),
    "push": ("reach",),
    "place": ("lift",),
    "stack": ("lift",),
    "unstack": ("stack",),
    "tower": ("stack",),
}
"""Skills that should be mastered before a skill is worth practising (shown to the model)."""
MAX_STEPS = 8
SIMILARITY_CUTOFF = 0.85
"""difflib ratio above which a step (and each of its misspelt words) is taken to mean the closest
candidate instruction"""
CURVE_WINDOW = 3
"""points of a learning curve whose slope the analysis judges"""
FLAT_SLOPE = 0.05
"""a curve whose slope over the window is at most this (success per point) is flat"""
DECISIONS = ("learn", "code", "replace")
VERIFIED_LEVEL = 0.8
"""verification success at which a coded skill is settled (it is not decided again)"""
LOW_SUCCESS = 0.2
"""last success below which a skill with at least MIN_POINTS points is worth coding"""
MIN_POINTS = 2


class Answer(BaseModel):
    """The base of every module's answer schema: unknown keys are ignored, on purpose.

    Models often add keys of their own beside the asked ones ("confidence", "notes"); refusing
    them would cost a re-ask (a whole prompt, with its image) and turn usable answers into
    fallbacks, and the transcript keeps the raw answer anyway. What tolerance must not do is
    read an answer with a misspelt or missing key (or one meant for another module) as "nothing
    to do", so every key that carries the decision is required, null where null is an answer
    (retrieve's unmatched step, add_skill's "no new skill"): such an answer is re-asked with
    the missing key named. Keys with defaults only carry explanations (rationale, reason).
    """

    model_config = ConfigDict(extra="ignore")


class TaskProposal(Answer):
    """The propose module's answer: tasks to practise next and why."""

    tasks: list[str] = Field(min_length=1)
    rationale: str = ""


class Decomposition(Answer):
    """The decompose module's answer: one instruction per skill to run, in order."""

    steps: list[str] = Field(min_length=1, max_length=MAX_STEPS)
    rationale: str = ""


class RetrievalAnswer(Answer):
    """The retrieve module's answer: the library skill and instruction of a step, or nulls."""

    skill: str | None
    instruction: str | None
    reason: str = ""


class SkillVerdict(Answer):
    """How one skill's training is going."""

    skill: str
    status: Literal["improving", "converged", "stalled"]
    reason: str = ""


class Analysis(Answer):
    """The analyse module's answer: a verdict for every skill with a curve."""

    skills: list[SkillVerdict]
    summary: str = ""


class MacroSpec(Answer):
    """A proposed macro skill: a template with slots {0}, {1}, ... and its steps."""

    name: str
    template: str
    steps: list[str] = Field(min_length=1, max_length=MAX_STEPS)
    description: str


class SkillProposal(Answer):
    """The add_skill module's answer: a macro to verify, or null."""

    skill: MacroSpec | None
    rationale: str = ""


class SkillDecision(Answer):
    """Whether to keep learning a skill, write it as code, or replace its learning by code."""

    skill: str
    decision: Literal["learn", "code", "replace"]
    reason: str = ""


class CodeOrLearn(Answer):
    """The code_or_learn module's answer: decisions per skill (a skill left out is learned)."""

    decisions: list[SkillDecision]
    summary: str = ""


class CodedSkillAnswer(Answer):
    """The write_code module's answer: a coded skill's Python source and why it should work."""

    source: str
    rationale: str = ""


# -- context shared by the prompts --------------------------------------------------------------


def library_context(library: SkillLibrary) -> list[dict[str, Any]]:
    """The library as the prompts' JSON context lists it: name, kind, template, steps."""
    return [
        {
            "name": skill.name,
            "kind": skill.executor.kind,
            "template": skill.template,
            "steps": list(skill.steps),
        }
        for skill in library
    ]


def runnable(library: SkillLibrary, instruction: Instruction) -> bool:
    """Whether the library can run an instruction (all its decomposed steps have executors)."""
    try:
        library.decompose(instruction)
    except ValueError:
        return False
    return True


# -- propose ----------------------------------------------------------------------------------


def propose_tasks(
    backend: Backend,
    tasks: Sequence[str],
    task_stats: Mapping[str, Mapping[str, Any]],
    skill_stats: Mapping[str, Mapping[str, Any]],
    library: SkillLibrary,
    n: int,
    image: ImageLike | None = None,
    mastery: float = 0.8,
) -> TaskProposal:
    """Ask which tasks to practise next; the answer's tasks are canonical members of `tasks`."""
    allowed = list(tasks)
    skills = list(dict.fromkeys(parse(task).skill for task in allowed))
    context = {
        "n": n,
        "mastery_threshold": mastery,
        "tasks": [
            {"task": task, "skill": parse(task).skill, **dict(task_stats.get(task, {}))}
            for task in allowed
        ],
        "skills": [
            {
                "skill": skill,
                "prerequisites": list(PREREQUISITES[skill]),
                **dict(skill_stats.get(skill, {})),
            }
            for skill in skills
        ],
        "library": library_context(library),
    }
    prompt = render_prompt("propose", context, n=n, library=library.describe())
    allowed_set = set(allowed)

    def validate(answer: TaskProposal) -> None:
        if len(answer.tasks) > n:
            raise ValueError(f"give at most {n} tasks, got {len(answer.tasks)}")
        for text in answer.tasks:
            task = str(parse(text))
            if task not in allowed_set:
                raise ValueError(f"task {text!r} is not one of the context's tasks")

    images = [] if image is None else [image]
    answer = backend.generate(prompt, images, TaskProposal, "propose", validate)
    answer.tasks = list(dict.fromkeys(str(parse(text)) for text in answer.tasks))
    return answer


# -- decompose and retrieve ---------------------------------------------------------------------


def decompose(
    backend: Backend, task: str, library: SkillLibrary, image: ImageLike | None = None
) -> Decomposition:
    """Ask how to run a task as a sequence of library skills (steps are retrieved next)."""
    instruction = parse(task)
    context = {
        "task": str(instruction),
        "skill": instruction.skill,
        "objects": list(instruction.objects),
        "library": library_context(library),
    }
    prompt = render_prompt("decompose", context, task=str(instruction), library=library.describe())

    def validate(answer: Decomposition) -> None:
        if any(not step.strip() for step in answer.steps):
            raise ValueError("every step must be a non-empty instruction")

    images = [] if image is None else [image]
    return backend.generate(prompt, images, Decomposition, "decompose", validate)


@dataclass
class Retrieval:
    """How one step was matched to the library: its instruction, skill and method."""

    step: str
    instruction: str | None
    skill: str | None
    method: Literal["parse", "similarity", "model", "unmatched"]
    reason: str = ""


def candidate_instructions(library: SkillLibrary, colours: Sequence[str]) -> list[str]:
    """Every instruction over the scene's colours that a non-macro library skill runs."""
    skills = [s.name for s in library if not s.is_macro and s.name in SKILLS]
    return [str(i) for i in all_instructions(tuple(colours), skills)]


def only_misspelt(step: str, candidate: str) -> bool:
    """Whether a step is the candidate with some words slightly misspelt (a plural, a typo): no
    word added, dropped or swapped for another and every colour exact, so matching it by
    similarity never changes what the step asks for (a "do not" or another block)."""
    ours = step.strip().lower().rstrip(".").split()
    theirs = candidate.lower().split()
    if len(ours) != len(theirs):
        return False
    for word, other in zip(ours, theirs, strict=True):
        if word == other:
            continue
        if word.strip(",") in COLOURS or other.strip(",") in COLOURS:
            return False
        if difflib.SequenceMatcher(None, word, other).ratio() < SIMILARITY_CUTOFF:
            return False
    return True


def retrieve(
    backend: Backend | None,
    step: str,
    library: SkillLibrary,
    colours: Sequence[str],
    image: ImageLike | None = None,
) -> Retrieval:
    """Match a step to a library skill: grammar parse, else similarity, then the model.

    A step that parses means exactly its parse: it runs as parsed, or is reported unmatched if
    it names a block the scene lacks or the library cannot run it. Raises VLMError if the model
    is asked and fails for good; with `backend=None` a step that neither parses nor differs
    from a candidate only by misspelt words is reported unmatched.
    """
    try:
        instruction = parse(step)
    except ValueError:
        instruction = None
    if instruction is not None:
        missing = [colour for colour in instruction.objects if colour not in colours]
        if missing:
            lacks = f"the scene has no {' or '.join(missing)} block"
            return Retrieval(step, None, None, "unmatched", lacks)
        if not runnable(library, instruction):
            return Retrieval(step, None, None, "unmatched", "the library cannot run it")
        return Retrieval(step, str(instruction), instruction.skill, "parse")
    candidates = candidate_instructions(library, colours)
    close = difflib.get_close_matches(step.strip().lower(), candidates, 3, SIMILARITY_CUTOFF)
    similar = next((text for text in close if only_misspelt(step, text)), None)
    if similar is not None:
        return Retrieval(step, similar, parse(similar).skill, "similarity")
    if backend is None:
        return Retrieval(step, None, None, "unmatched", "no parse and no similar instruction")
    context = {
        "step": step,
        "colours": list(colours),
        "candidates": candidates,
        "library": library_context(library),
    }
    prompt = render_prompt("retrieve", context, step=step, library=library.describe())

    def validate(answer: RetrievalAnswer) -> None:
        if (answer.skill is None) != (answer.instruction is None):
            raise ValueError("give both skill and instruction, or null for both")
        if answer.skill is None:
            return
        if answer.skill not in library:
            names = ", ".join(library.names())
            raise ValueError(f"unknown skill {answer.skill!r}; library skills: {names}")
        chosen = parse(answer.instruction)
        if not set(chosen.objects) <= set(colours):
            raise ValueError(f"{answer.instruction!r} names blocks the scene lacks")
        if not runnable(library, chosen):
            raise ValueError(f"the library cannot run {answer.instruction!r}")

    images = [] if image is None else [image]
    answer = backend.generate(prompt, images, RetrievalAnswer, "retrieve", validate)
    if answer.instruction is None:
        return Retrieval(step, None, None, "unmatched", answer.reason)
    chosen = parse(answer.instruction)
    return Retrieval(step, str(chosen), chosen.skill, "model", answer.reason)


@dataclass
class Plan:
    """A task's decomposition and the retrieval of each step; `steps` is None if unusable."""

    task: str
    retrievals: list[Retrieval] = field(default_factory=list)
    rationale: str = ""

    @property
    def unmatched(self) -> list[str]:
        return [r.step for r in self.retrievals if r.instruction is None]

    @property
    def steps(self) -> list[str] | None:
        """The instructions to run, or None if any step is unmatched."""
        if not self.retrievals or self.unmatched:
            return None
        return [r.instruction for r in self.retrievals if r.instruction is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "steps": self.steps,
            "unmatched": self.unmatched,
            "methods": [r.method for r in self.retrievals],
            "rationale": self.rationale,
        }


# -- analyse ----------------------------------------------------------------------------------


def curves_table(curves: Mapping[str, Sequence[float]]) -> str:
    """A Markdown table of per-skill success per iteration."""
    length = max((len(values) for values in curves.values()), default=0)
    header = "| skill | " + " | ".join(str(i) for i in range(length)) + " |"
    rule = "| --- |" + " --- |" * length
    rows = [
        f"| {skill} | " + " | ".join(f"{v:.2f}" for v in values) + " |"
        for skill, values in curves.items()
    ]
    return "\n".join([header, rule, *rows])


def analyse(
    backend: Backend, curves: Mapping[str, Sequence[float]], converged_level: float = 0.8
) -> dict[str, SkillVerdict]:
    """Ask, from a table and a plot of the curves, how each skill's training is going."""
    curves = {skill: [float(v) for v in values] for skill, values in curves.items()}
    context = {
        "curves": curves,
        "converged_level": converged_level,
        "window": CURVE_WINDOW,
        "flat_slope": FLAT_SLOPE,
    }
    prompt = render_prompt(
        "analyse", context, table=curves_table(curves), converged_level=converged_level
    )

    def validate(answer: Analysis) -> None:
        judged = [verdict.skill for verdict in answer.skills]
        unknown = sorted(set(judged) - set(curves))
        if unknown:
            raise ValueError(f"unknown skills {unknown}; judge exactly: {', '.join(curves)}")
        missing = [skill for skill in curves if skill not in judged]
        if missing or len(judged) != len(set(judged)):
            raise ValueError(f"judge every skill exactly once: {', '.join(curves)}")

    answer = backend.generate(
        prompt, [skill_curves_png(curves, size=(5.0, 3.5), dpi=80)], Analysis, "analyse", validate
    )
    return {verdict.skill: verdict for verdict in answer.skills}


# -- add a skill --------------------------------------------------------------------------------


def macro_from_spec(spec: MacroSpec, library: SkillLibrary, blocks: int = len(COLOURS)) -> Skill:
    """The Skill a spec describes; ValueError unless it is new, made of library skills and names
    at most the scene's `blocks` blocks (a 4-block macro cannot run in a 3-block scene)."""
    if spec.name in library:
        raise ValueError(f"the library already has a skill {spec.name!r}; choose a new name")
    skill = Skill(spec.name, spec.template, spec.description, MacroExecutor(tuple(spec.steps)))
    if skill.blocks > blocks:
        raise ValueError(
            f"the template {spec.template!r} names {skill.blocks} blocks; the scene has "
            f"{blocks}, so a macro may name at most {blocks} ({{0}} .. {{{blocks - 1}}})"
        )
    for step in spec.steps:
        instruction = parse(step.format(*COLOURS))
        if instruction.skill not in library:
            raise ValueError(f"step {step!r} uses the skill {instruction.skill!r}, not in library")
    return skill


def propose_skill(
    backend: Backend,
    library: SkillLibrary,
    skill_stats: Mapping[str, Mapping[str, Any]],
    mastery: float = 0.8,
    rejected: Sequence[str] = (),
    blocks: int = len(COLOURS),
) -> tuple[Skill | None, str]:
    """Ask for a new macro skill for a scene of `blocks` blocks; return it (not yet verified) or
    None, and the rationale."""
    context = {
        "library": library_context(library),
        "skills": [{"skill": name, **dict(stats)} for name, stats in skill_stats.items()],
        "mastery_threshold": mastery,
        "rejected": list(rejected),
    }
    prompt = render_prompt("add_skill", context, library=library.describe())

    def validate(answer: SkillProposal) -> None:
        if answer.skill is not None:
            if answer.skill.name in rejected:
                raise ValueError(f"{answer.skill.name!r} failed verification before")
            macro_from_spec(answer.skill, library, blocks)

    answer = backend.generate(prompt, [], SkillProposal, "add_skill", validate)
    if answer.skill is None:
        return None, answer.rationale
    return macro_from_spec(answer.skill, library, blocks), answer.rationale


# -- coded skills (after RL-GPT: a slow agent decides, a fast agent writes the code) -------------


def runs_as_steps(library: SkillLibrary, name: str) -> bool:
    """Whether the library runs instructions of grammar skill `name` as other skills' steps (a
    tower as its stacks, or a macro that matches them), judged on its first instruction over
    three colours: an executor of its own, e.g. code, would then never run."""
    if name not in SKILLS:
        return False
    instruction = all_instructions(COLOURS[:3], [name])[0]
    try:
        return library.decompose(instruction) != [instruction]
    except ValueError:  # its steps have no executor: it cannot run whole either
        return True


def decide_code_or_learn(
    backend: Backend,
    library: SkillLibrary,
    statuses: Mapping[str, str],
    curves: Mapping[str, Sequence[float]],
    coded: Mapping[str, float],
    verified_level: float = VERIFIED_LEVEL,
    low_success: float = LOW_SUCCESS,
) -> CodeOrLearn:
    """Ask, per open skill, whether to keep learning it, code it, or replace its learning by code.

    `statuses` are the analyse module's verdicts, `curves` the per-skill learning curves and
    `coded` the verification success of skills coded before. Open skills are the library's
    non-macro skills not yet coded with success >= verified_level that run whole: macros and
    composed skills (`runs_as_steps`: a tower runs as its stacks, so code of its own would
    never run) are compositions and verified code is settled, so coding any of them is invalid
    (re-asked). The answer holds exactly one decision per open skill, in library order; an open
    skill the model left out is learned.
    """
    settled = {name for name, success in coded.items() if success >= verified_level}
    macros = [skill.name for skill in library if skill.is_macro]
    composed = [
        name for name in library.names() if name not in macros and runs_as_steps(library, name)
    ]
    open_skills = [
        name
        for name in library.names()
        if name not in macros and name not in composed and name not in settled
    ]
    curves = {skill: [float(v) for v in values] for skill, values in curves.items()}
    context = {
        "skills": [
            {
                "skill": skill.name,
                "kind": skill.executor.kind,
                "template": skill.template,
                "status": statuses.get(skill.name),
                "curve": curves.get(skill.name, []),
                "coded_success": coded.get(skill.name),
            }
            for skill in library
            if not skill.is_macro
        ],
        "open": open_skills,
        "macros": macros,
        "composed": composed,
        "verified_level": verified_level,
        "low_success": low_success,
        "min_points": MIN_POINTS,
    }
    prompt = render_prompt(
        "code_or_learn",
        context,
        library=library.describe(),
        table=curves_table(curves),
        verified_level=verified_level,
    )

    def validate(answer: CodeOrLearn) -> None:
        decided = [d.skill for d in answer.decisions]
        duplicates = sorted({name for name in decided if decided.count(name) > 1})
        if duplicates:
            raise ValueError(f"decide each skill at most once; repeated: {duplicates}")
        for d in answer.decisions:
            if d.skill not in library:
                names = ", ".join(open_skills)
                raise ValueError(f"unknown skill {d.skill!r}; decide among: {names}")
            if d.decision == "learn":
                continue
            if d.skill in macros:
                raise ValueError(f"{d.skill!r} is a macro, a composition of skills: not coded")
            if d.skill in composed:
                raise ValueError(
                    f"{d.skill!r} runs as other skills' steps, so code of its own would never "
                    "run: not coded (code those skills instead)"
                )
            if d.skill in settled:
                raise ValueError(f"{d.skill!r} is coded and verified already: not coded again")

    answer = backend.generate(prompt, [], CodeOrLearn, "code_or_learn", validate)
    given = {d.skill: d for d in answer.decisions}
    answer.decisions = [
        given.get(name, SkillDecision(skill=name, decision="learn", reason="no decision: learn"))
        for name in open_skills
    ]
    return answer


def write_skill_code(
    backend: Backend, skill: Skill, api_reference: str, failures: Sequence[str] = ()
) -> CodedSkillAnswer:
    """Ask for a coded skill's source; it is accepted only once the sandbox's check passes it.

    `failures` are short reasons earlier attempts failed (sandbox rejections, oracle verdicts of
    verification trials), shown so the next source can avoid them.
    """
    context = {
        "skill": {"name": skill.name, "template": skill.template, "description": skill.description},
        "failures": list(failures),
        "entry_point": "def skill(blocks):",
    }
    prompt = render_prompt(
        "write_code",
        context,
        name=skill.name,
        template=skill.template,
        description=skill.description,
        api_reference=api_reference,
    )

    def validate(answer: CodedSkillAnswer) -> None:
        try:
            check_source(answer.source)
        except SkillRejected as rejected:
            raise ValueError(f"the sandbox rejected the source: {rejected.reason}") from None

    return backend.generate(prompt, [], CodedSkillAnswer, "write_code", validate)
