"""The vlm curriculum's part of a collect iteration: plans, analysis, promotions, new skills.

`experimenter/loop.py` calls these when its curriculum is `vlm`:

1. `plan_tasks`: decompose each proposed task and retrieve its steps; the embodiment runs the
   plans (`PlannedEmbodiment`); a task whose plan has unmatched steps, or does not fit the step
   limit, runs as the library decomposes it, and the reason is reported;
2. `analyse_and_promote`: the model judges every skill's curve; a skill that passed
   promote_threshold runs its learned policy only once its curve is "converged"; a failed
   analysis falls back to the plain threshold rule (stalled skills are sampled less by the
   curriculum itself);
3. `add_verified_skill`: the model may propose a macro; it joins the library only if the oracle
   judges its task successful in at least `threshold` of the seeded trials;
4. `code_skills` (with `vlm_code_skills`, after RL-GPT): the slow agent decides per skill whether
   to keep learning it or to have it written as code; the fast agent writes the code for each
   skill to code; a coded skill runs in the sandbox and joins the library (replacing the skill's
   executor) only if the oracle judges it successful in at least `threshold` of seeded trials
   (a skill with no tasks in the practice env has no trials, so it never joins).
   Why a version failed (sandbox rejections, trials) is shown to the fast agent next time.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from gameon.envs.language import Instruction
from gameon.experimenter.curriculum import tasks_by_skill
from gameon.experimenter.embodiment import Embodiment
from gameon.experimenter.sandbox import namespace_command
from gameon.experimenter.skills import (
    CodedExecutor,
    Skill,
    SkillLibrary,
    as_instruction,
    promote_by_rate,
)
from gameon.experimenter.vlm.backend import TRANSCRIPT_FILE
from gameon.experimenter.vlm_curriculum import VLMCurriculum


class PlannedEmbodiment(Embodiment):
    """An embodiment that runs the experimenter's plan of a task when it has one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plans: dict[str, list[str]] = {}

    def plan(self, task: str | Instruction) -> list[Instruction]:
        """The task's planned steps (each decomposed by the library), else the library's plan."""
        planned = self.plans.get(str(as_instruction(task)))
        if planned is None:
            return super().plan(task)
        steps = [part for step in planned for part in self.library.decompose(step, self.atomic)]
        return self.check_plan(task, steps)

    @contextlib.contextmanager
    def library_plans(self) -> Iterator[None]:
        """Within the block, tasks run as the library decomposes them (verification trials must
        not follow the model's plans for the iteration's tasks); the plans return after it."""
        plans, self.plans = self.plans, {}
        try:
            yield
        finally:
            self.plans = plans


def plan_tasks(
    curriculum: VLMCurriculum, embodiment: PlannedEmbodiment, tasks: Sequence[str]
) -> list[dict[str, Any]]:
    """Plan each distinct task; set the usable plans on the embodiment; return the reports."""
    colours = tuple(embodiment.env.unwrapped.colours)
    embodiment.plans = {}
    reports = []
    for task in dict.fromkeys(tasks):
        plan = curriculum.plan(task, colours)
        report = plan.to_dict()
        if plan.steps is not None:
            embodiment.plans[plan.task] = plan.steps
            try:
                embodiment.plan(plan.task)
            except ValueError as error:
                del embodiment.plans[plan.task]
                curriculum.count_fallback()
                report["rejected"] = str(error)
        report["used"] = plan.task in embodiment.plans
        reports.append(report)
    return reports


def analyse_and_promote(
    curriculum: VLMCurriculum,
    library: SkillLibrary,
    curves: dict[str, list[float]],
    rates: dict[str, float],
    checkpoint: str,
    promote_threshold: float,
    noise: float,
) -> dict[str, str] | None:
    """Judge the curves, then switch executors by verdict and rate; return the verdicts."""
    statuses = curriculum.analyse(curves)
    promote_by_rate(library, rates, checkpoint, promote_threshold, noise, verdicts=statuses)
    return statuses


def verify_skill(
    skill: Skill, embodiment: Embodiment, seeds: Sequence[int], colours: Sequence[str]
) -> tuple[int, int]:
    """Run the macro's task on seeded trials with the macro in the library; (successes, steps).

    The macro is added to the embodiment's library for the trials and removed afterwards; the
    caller adds it for good if the successes suffice. A trial saved by a scripted takeover (the
    mixed collector) is not a success of the macro.
    """
    task = skill.template.format(*colours)
    library = embodiment.library
    library.add(skill)
    try:
        records = [embodiment.execute(task, int(seed)) for seed in seeds]
    finally:
        library.remove(skill.name)
    successes = sum(record.attempt_success for record in records)
    return successes, sum(record.steps for record in records)


def add_verified_skill(
    curriculum: VLMCurriculum,
    embodiment: PlannedEmbodiment,
    seeds: Sequence[int],
    threshold: float,
) -> dict[str, Any] | None:
    """Ask for a macro and verify it on seeded trials; add it if it passes; return a report."""
    colours = tuple(embodiment.env.unwrapped.colours)
    skill, rationale = curriculum.propose_skill(len(colours))
    if skill is None:
        return None
    with embodiment.library_plans():
        try:
            successes, steps = verify_skill(skill, embodiment, seeds, colours)
        except ValueError as error:
            successes, steps, rationale = 0, 0, f"{rationale}; could not run: {error}"
    added = bool(seeds) and successes / len(seeds) >= threshold
    if added:
        embodiment.library.add(skill)
    else:
        curriculum.reject_skill(skill.name)
    return {
        "skill": skill.to_dict(),
        "rationale": rationale,
        "trials": len(seeds),
        "successes": successes,
        "env_steps": steps,
        "added": added,
    }


def code_skills(
    curriculum: VLMCurriculum,
    embodiment: PlannedEmbodiment,
    tasks: Sequence[str],
    seeds: Sequence[int],
    threshold: float,
) -> dict[str, Any]:
    """Ask the slow agent what to code, the fast agent for the code, verify each coded skill on
    the seeded trials (tasks of its skill drawn from `tasks`); return decisions and verdicts.

    On a machine where no sandbox works this raises RuntimeError (naming what to install)
    before the model is asked: every coded skill would be rejected unrun, so the run would pay
    for code it can never verify and report the coding as tried."""
    namespace_command()
    library = embodiment.library
    coded = {
        skill.name: float(skill.executor.verification["success_rate"])
        for skill in library
        if isinstance(skill.executor, CodedExecutor) and skill.executor.verification
    }
    decisions = curriculum.decide_code_or_learn(coded)
    reports = []
    for decision in decisions:
        if decision.decision == "learn":
            continue
        report: dict[str, Any] = {"skill": decision.skill, "decision": decision.decision}
        reports.append(report)
        answer = curriculum.write_code(decision.skill)
        if answer is None:
            report["added"] = False
            report["reason"] = "the fast agent gave no valid source"
            continue
        executor = CodedExecutor(answer.source)
        trials = tasks_by_skill(tasks).get(decision.skill, ())
        verification = verify_coded(executor, embodiment, trials, seeds)
        tried, succeeded = verification["trials"], verification["successes"]
        added = tried > 0 and succeeded / tried >= threshold
        if added:
            library.replace_executor(decision.skill, CodedExecutor(answer.source, verification))
        else:
            if tried == 0:
                failure = "not verified: no tasks of this skill in the practice env"
            else:
                failure = f"{succeeded} of {tried} trials succeeded"
            if executor.rejections:
                failure += f"; the sandbox rejected it: {executor.rejections[0]}"
            report["reason"] = failure
            curriculum.record_code_failure(decision.skill, failure)
        report |= {
            "rationale": answer.rationale,
            "source": answer.source,
            "verification": verification,
            "added": added,
        }
    return {"decisions": [d.model_dump() for d in decisions], "coded": reports}


def verify_coded(
    executor: CodedExecutor,
    embodiment: PlannedEmbodiment,
    tasks: Sequence[str],
    seeds: Sequence[int],
) -> dict[str, Any]:
    """Run the coded skill on one task per seed (cycling through `tasks`; none without tasks);
    the oracle judges."""
    outcomes = []
    with embodiment.library_plans():
        for task, seed in zip(itertools.cycle(tasks), seeds) if tasks else ():
            record = embodiment.execute(task, int(seed), executor=executor)
            outcomes.append({"task": task, "seed": int(seed), "success": bool(record.success)})
    successes = sum(outcome["success"] for outcome in outcomes)
    return {
        "trials": len(outcomes),
        "successes": successes,
        "success_rate": successes / len(outcomes) if outcomes else 0.0,
        "outcomes": outcomes,
        "rejections": list(executor.rejections[:3]),
        "transcript": TRANSCRIPT_FILE,
    }
