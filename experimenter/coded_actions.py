"""Coded actions for RL (RL-GPT): a Gymnasium wrapper that offers coded skills beside the
continuous action.

`CodedActions(env, coded_skills, max_skill_steps)` keeps the action space a single Box, so
learners with continuous heads (PPO, SAC) use it unchanged: the env's 5-d action, then one
selection score per coded skill, in the order of `coded_skills`. It refuses up front coded
skills that could never run (`check_coded_skills`: a source the sandbox's check refuses, or no
working sandbox on this machine).

The rule: let i be the coded skill with the largest score (the first on a tie). If its score is
greater than 0, the wrapper runs coded skill i in the sandbox (`sandbox.SandboxedSkill`) on the
env's active instruction (blocks = `instruction.objects`, relation = `instruction.relation`),
one env step per skill action, until the skill returns, the instruction succeeds, the episode
ends or `max_skill_steps` env steps pass; the continuous part is ignored. Otherwise (every score
<= 0) the continuous part is one ordinary env step. A selection that takes no env step (the
instruction already succeeds, so no skill is started; the skill returned at once; or the
sandbox rejected it before its first action) falls back to the continuous part for one env step,
so every agent step advances the env by at least one step.

The step returns the last observation, the summed reward, terminated and truncated of the last
env step and its info, plus `env_steps` (env steps this agent step took, always present) and,
after a selection, `coded_skill` (its name), `coded_steps` (env steps the skill itself took)
and `rejection` (the sandbox's one-line reason) if it was rejected. A rejection is logged (the
sandbox's warning, then this wrapper's line naming the skill) and counted in `rejections`; the
episode goes on. Each selection starts a fresh sandboxed process (~0.1 s, mostly the child's
Python start-up), so a selection that ends at once costs far more than an env step.

The semi-MDP consequence: one agent step may be many env steps. Learners that count a budget
must count env steps (`env_steps`, or `vector_env_steps` for vector envs), not agent steps, to
be compared with learners without coded actions at the same budget; rewards are summed without
discounting inside a coded action, and a learner that discounts per agent step discounts a
coded action as one step.

For the baselines (`--coded-skills`): `load_coded_skills` reads "templates" or a skill-library
JSON, and `coded_wrapper` is the wrapper that `baselines.common.make_training_envs` puts around
each training env and `OnlineRun.evaluate` (and `gameon.evaluation.evaluate`) around the
evaluation env.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from gameon.envs import oracle
from gameon.experimenter.coded_api import TEMPLATES, scene_message
from gameon.experimenter.sandbox import (
    SandboxedSkill,
    SandboxLimits,
    SkillRejected,
    check_source,
    namespace_command,
)
from gameon.experimenter.skills import CodedExecutor, SkillLibrary

logger = logging.getLogger("gameon.coded_actions")

DEFAULT_MAX_SKILL_STEPS = 200
"""Env steps a coded action may take: the embodiment's budget for place and stack."""
TEMPLATES_NAME = "templates"
"""The `coded_skills` spec that means `coded_api.TEMPLATES` (reach, lift, place, stack)."""


class CodedActions(gym.Wrapper):
    """Appends one selection score per coded skill to a Box action space; a positive largest
    score runs that coded skill for up to `max_skill_steps` env steps (see the module doc)."""

    def __init__(
        self,
        env: gym.Env,
        coded_skills: Mapping[str, str],
        max_skill_steps: int = DEFAULT_MAX_SKILL_STEPS,
        limits: SandboxLimits | None = None,
    ) -> None:
        super().__init__(env)
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"CodedActions needs a 1-d Box action space, got {space}")
        if not coded_skills:
            raise ValueError("CodedActions needs at least one coded skill")
        if max_skill_steps < 1:
            raise ValueError(f"max_skill_steps must be >= 1, got {max_skill_steps}")
        self.limits = limits or SandboxLimits()
        check_coded_skills(coded_skills, self.limits)
        self.coded_skills = dict(coded_skills)
        self.names = list(self.coded_skills)
        self.max_skill_steps = max_skill_steps
        self.continuous_size = space.shape[0]
        scores = np.ones(len(self.names), np.float32)
        self.action_space = gym.spaces.Box(
            np.concatenate([space.low, -scores]).astype(np.float32),
            np.concatenate([space.high, scores]).astype(np.float32),
            dtype=np.float32,
        )
        self.selections: Counter[str] = Counter()
        self.rejections: Counter[str] = Counter()

    def selection(self, action: np.ndarray) -> str | None:
        """The coded skill an action selects (largest score, if above 0), else None."""
        scores = np.asarray(action)[self.continuous_size :]
        best = int(np.argmax(scores))
        return self.names[best] if scores[best] > 0 else None

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        action = np.asarray(action, np.float32)
        if action.shape != self.action_space.shape:
            raise ValueError(
                f"action must have shape {self.action_space.shape} (the env's "
                f"{self.continuous_size} dims, then scores for {self.names}), got {action.shape}"
            )
        continuous = action[: self.continuous_size]
        name = self.selection(action)
        if name is None:
            observation, reward, terminated, truncated, info = self.env.step(continuous)
            return observation, reward, terminated, truncated, {**info, "env_steps": 1}
        return self._run_coded(name, continuous)

    def _run_coded(
        self, name: str, continuous: np.ndarray
    ) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        unwrapped = self.env.unwrapped
        if unwrapped.instruction is None:
            raise RuntimeError("call reset() before step()")
        self.selections[name] += 1
        steps, total, rejection, last = 0, 0.0, None, None
        if not oracle.success(unwrapped.instruction, unwrapped.scene(), unwrapped.start_scene):
            steps, total, rejection, last = self._run_skill(name)
        if last is None:
            last = self.env.step(continuous)
            total = float(last[1])
        observation, _, terminated, truncated, info = last
        info = {**info, "env_steps": max(steps, 1), "coded_skill": name, "coded_steps": steps}
        if rejection is not None:
            info["rejection"] = rejection
        return observation, total, terminated, truncated, info

    def _run_skill(self, name: str) -> tuple[int, float, str | None, tuple | None]:
        """Run one coded skill in the sandbox: its env steps, summed reward, rejection reason
        (or None) and last env step (None if it took none)."""
        instruction = self.env.unwrapped.instruction
        skill = SandboxedSkill(
            self.coded_skills[name], instruction.objects, self.limits, instruction.relation
        )
        steps, total, last = 0, 0.0, None
        try:
            while steps < self.max_skill_steps:
                action = skill.act(scene_message(self.env))
                if action is None:
                    break
                last = self.env.step(np.asarray(action, np.float32))
                _, reward, terminated, truncated, info = last
                total += float(reward)
                steps += 1
                if terminated or truncated or info["success"]:
                    break
        except SkillRejected as error:
            self.rejections[name] += 1
            logger.info("coded skill %r rejected after %d env steps: %s", name, steps, error.reason)
            return steps, total, error.reason, last
        finally:
            skill.close()
        return steps, total, None, last


def check_coded_skills(
    coded_skills: Mapping[str, str], limits: SandboxLimits | None = None
) -> None:
    """Refuse, before any training, coded skills that could never run: a source the sandbox's
    check refuses (ValueError naming the skill), or a machine where no sandbox works
    (RuntimeError naming what to install). Either would otherwise be a rejection at every
    selection, logged and survived, so the learner would train on with no coded action at all."""
    for name, source in coded_skills.items():
        if not isinstance(name, str) or not name or not isinstance(source, str):
            raise ValueError(f"a coded skill needs a name and source text, got {name!r}")
        try:
            check_source(source, limits or SandboxLimits())
        except SkillRejected as error:
            raise ValueError(f"coded skill {name!r} cannot run: {error.reason}") from None
    namespace_command()


def vector_env_steps(info: Mapping[str, Any], ended: np.ndarray) -> np.ndarray:
    """Env steps each sub-env of a vector env took in its last step: `env_steps` from its info,
    or from `final_info` where an episode ended (SAME_STEP autoreset); 1 where absent."""
    steps = np.ones(len(ended), np.int64)
    for source, rows in ((info, ~ended), (info.get("final_info", {}), ended)):
        if "env_steps" in source:
            present = source["_env_steps"] & rows
            steps[present] = source["env_steps"][present]
    return steps


def coded_skills_from_library(path: str | Path) -> dict[str, str]:
    """The coded skills of a skill-library JSON (`SkillLibrary.save`'s form): name -> source."""
    library = SkillLibrary.load(path)
    return {
        skill.name: skill.executor.source
        for skill in library
        if isinstance(skill.executor, CodedExecutor)
    }


def load_coded_skills(spec: str) -> dict[str, str]:
    """The coded skills a learner's `--coded-skills` names: "templates" or a library JSON path;
    refused (`check_coded_skills`) if none could run here."""
    skills = dict(TEMPLATES) if spec == TEMPLATES_NAME else coded_skills_from_library(spec)
    if not skills:
        raise ValueError(f"{spec} holds no coded skills")
    check_coded_skills(skills)
    return skills


def coded_wrapper(coded_skills: Mapping[str, str], max_skill_steps: int) -> Any:
    """A picklable `env -> CodedActions(env, ...)`, for `gym.make_vec(wrappers=[...])`."""
    return functools.partial(
        CodedActions, coded_skills=dict(coded_skills), max_skill_steps=max_skill_steps
    )
