"""The `rules` backend: a deterministic, offline stand-in for the VLM (labelled `vlm[rules]`).

It answers every module's request from the JSON context block of the prompt alone (never from
the images), through the same `Backend.generate` path as a real model, so its answers are
validated, transcribed and replayable like any other:

- propose: tasks ranked by learning progress, by low-but-nonzero success, by whether their
  skill's prerequisites are mastered, against stalled and mastered skills;
- decompose: the grammar's decomposition (macros, a tower into stacks from the bottom up);
- retrieve: the nearest candidate instruction by text similarity, or null;
- analyse: improving / converged / stalled from the slope and level of each curve's last points;
- add_skill: a tower macro made of stacks once stack is reliable;
- code_or_learn: code only skills with a reference source (`coded_api.TEMPLATES`) never coded
  before: "replace" when the curve is stalled, "code" when its last success is below
  `low_success` after at least `min_points` points, else "learn";
- write_code: the reference source of the skill, or an empty source (which the sandbox rejects,
  so the module fails honestly) for a skill without one.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from gameon.envs.language import parse
from gameon.experimenter.coded_api import TEMPLATES
from gameon.experimenter.skills import MacroExecutor, ScriptedExecutor, Skill, SkillLibrary
from gameon.experimenter.vlm.backend import Backend, Transcript, Usage
from gameon.experimenter.vlm.prompts import extract_context

RULES_MODEL = "rules-v1"
RETRIEVE_CUTOFF = 0.6
TOWER_MACRO = {
    "name": "tower_of_stacks",
    "template": "build a tower of {0}, {1} and {2} from the bottom up",
    "steps": ["stack the {1} block on the {0} block", "stack the {2} block on the {1} block"],
    "description": "build a three-block tower as two stacks from the bottom up",
}


class RulesBackend(Backend):
    """Answers each module from the statistics in its prompt's context, deterministically."""

    def __init__(self, transcript: Transcript | None = None, max_reasks: int = 2) -> None:
        """A rules backend writing to `transcript`."""
        super().__init__("rules", RULES_MODEL, transcript, max_reasks=max_reasks, cache=False)

    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        """Unused: the rules need the module (see _complete_request)."""
        raise NotImplementedError("RulesBackend answers through _complete_request")

    def _complete_request(
        self, prompt: str, images: list[bytes], schema: dict, req_hash: str, module: str
    ) -> tuple[str, Usage]:
        """Answer from the prompt's JSON context with the module's rule."""
        rules = {
            "propose": propose,
            "decompose": decompose,
            "retrieve": retrieve,
            "analyse": analyse,
            "add_skill": add_skill,
            "code_or_learn": code_or_learn,
            "write_code": write_code,
        }
        if module not in rules:
            raise ValueError(f"the rules backend has no rule for module {module!r}")
        return json.dumps(rules[module](extract_context(prompt))), Usage()


def _skill_success(stats: Mapping[str, Any]) -> float:
    value = stats.get("success")
    return 0.0 if value is None else float(value)


def propose(context: Mapping[str, Any]) -> dict[str, Any]:
    """The n tasks of highest score (ties: context order); see the module docstring."""
    mastery = float(context["mastery_threshold"])
    skills = {entry["skill"]: entry for entry in context["skills"]}
    scored = []
    for index, entry in enumerate(context["tasks"]):
        skill = skills.get(entry["skill"], {})
        attempts, successes = int(entry.get("attempts", 0)), int(entry.get("successes", 0))
        score = 4.0 * float(entry.get("learning_progress", 0.0))
        if attempts == 0:
            score += 0.5
        elif successes == 0:
            score += 0.2
        elif successes < attempts:
            score += 1.0 - successes / attempts
        else:
            score -= 0.5
        prerequisites = skill.get("prerequisites", [])
        if all(_skill_success(skills.get(p, {})) >= mastery for p in prerequisites):
            score += 1.0
        if skill.get("status") == "stalled":
            score -= 1.0
        if _skill_success(skill) >= mastery:
            score -= 0.5
        scored.append((-round(score, 9), index, entry["task"]))
    chosen = [task for _, _, task in sorted(scored)[: int(context["n"])]]
    names = sorted({parse(task).skill for task in chosen})
    return {
        "tasks": chosen,
        "rationale": f"rules: highest learning-progress score, skills {', '.join(names)}",
    }


def _library(entries: list[Mapping[str, Any]]) -> SkillLibrary:
    """A library of the context's skills (scripted placeholders for executors)."""
    library = SkillLibrary()
    for entry in entries:
        if entry["kind"] == "macro":
            executor = MacroExecutor(tuple(entry["steps"]))
        else:
            executor = ScriptedExecutor()
        library.add(Skill(entry["name"], entry["template"], "-", executor))
    return library


def decompose(context: Mapping[str, Any]) -> dict[str, Any]:
    """The grammar's decomposition of the task over the context's library."""
    try:
        steps = [str(step) for step in _library(context["library"]).decompose(context["task"])]
    except ValueError:
        steps = [context["task"]]
    return {"steps": steps, "rationale": "rules: grammar decomposition"}


def retrieve(context: Mapping[str, Any]) -> dict[str, Any]:
    """The most similar candidate instruction, or null when none is similar enough."""
    close = difflib.get_close_matches(
        str(context["step"]).lower(), context["candidates"], 1, RETRIEVE_CUTOFF
    )
    if not close:
        return {"skill": None, "instruction": None, "reason": "rules: no similar skill"}
    return {
        "skill": parse(close[0]).skill,
        "instruction": close[0],
        "reason": "rules: most similar instruction",
    }


def verdict(values: list[float], level: float, window: int, flat: float) -> str:
    """improving / converged / stalled from the last `window` points' slope and last level."""
    if len(values) < 2:
        return "improving"
    recent = values[-window:]
    slope = float(np.polyfit(np.arange(len(recent)), recent, 1)[0])
    if recent[-1] >= level and slope >= -flat:
        return "converged"
    if slope > flat:
        return "improving"
    if len(values) >= window:
        return "stalled"
    return "improving"


def analyse(context: Mapping[str, Any]) -> dict[str, Any]:
    """A verdict for every curve of the context."""
    level, window = float(context["converged_level"]), int(context["window"])
    flat = float(context["flat_slope"])
    skills = [
        {
            "skill": skill,
            "status": verdict([float(v) for v in values], level, window, flat),
            "reason": f"rules: last {min(window, len(values))} points, level {values[-1]:.2f}",
        }
        for skill, values in context["curves"].items()
    ]
    return {"skills": skills, "summary": "rules: slope and level of each curve"}


def add_skill(context: Mapping[str, Any]) -> dict[str, Any]:
    """A tower macro of stacks once stack is reliable and no tower macro exists, else null."""
    mastery = float(context["mastery_threshold"])
    names = {entry["name"] for entry in context["library"]}
    stats = {entry["skill"]: entry for entry in context["skills"]}
    has_tower_macro = any(
        entry["kind"] == "macro" and entry["template"] == TOWER_MACRO["template"]
        for entry in context["library"]
    )
    ready = "stack" in names and _skill_success(stats.get("stack", {})) >= mastery
    fresh = TOWER_MACRO["name"] not in names and TOWER_MACRO["name"] not in context["rejected"]
    if ready and fresh and not has_tower_macro:
        return {"skill": dict(TOWER_MACRO), "rationale": "rules: stack is reliable"}
    return {"skill": None, "rationale": "rules: no macro is due"}


def code_or_learn(context: Mapping[str, Any]) -> dict[str, Any]:
    """Code an open, never-coded skill with a reference source if stalled or low; else learn."""
    low, min_points = float(context["low_success"]), int(context["min_points"])
    entries = {entry["skill"]: entry for entry in context["skills"]}
    decisions = []
    for name in context["open"]:
        entry = entries[name]
        curve = [float(v) for v in entry["curve"]]
        codable = name in TEMPLATES and entry["coded_success"] is None
        if codable and entry["status"] == "stalled":
            decision, reason = "replace", "rules: stalled, and a reference source exists"
        elif codable and len(curve) >= min_points and curve[-1] < low:
            decision, reason = "code", f"rules: success {curve[-1]:.2f} after {len(curve)} points"
        else:
            decision, reason = "learn", "rules: keep learning"
        decisions.append({"skill": name, "decision": decision, "reason": reason})
    return {"decisions": decisions, "summary": "rules: code stalled or low skills with a source"}


def write_code(context: Mapping[str, Any]) -> dict[str, Any]:
    """The skill's reference source from `coded_api.TEMPLATES`; an empty source if none."""
    name = context["skill"]["name"]
    if name not in TEMPLATES:
        return {"source": "", "rationale": f"rules: no reference source for {name!r}"}
    return {"source": TEMPLATES[name], "rationale": f"rules: the reference source of {name!r}"}
