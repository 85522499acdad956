"""The embodiment: run a task as a sequence of skills in one episode, judge each, record it all.

`Embodiment.execute(task, seed)` resets the env on the task, asks the skill library to decompose
it, and runs the sub-instructions one after the other in the same episode. Each one becomes the
env's active instruction (its goal is what the observation carries and what the reward scores),
gets a fresh policy from its skill's executor, and runs for at most its step budget or until
the oracle says it succeeded, judged against the scene at the start of that skill. At the end
the oracle judges the whole task against the episode's start. Every skill acts at least once.
With a `takeover` executor (the collect loop's `mixed` collector), a skill that a learned policy
failed is run once more by the takeover (the scripted expert) with a fresh budget; with an
`executor` given to `execute` (the `demo` collector's demonstrations), every skill runs with it.
Every step records who acted (`EpisodeRecord.actors`, indices into `ACTORS`).

`EpisodeRecord.relabel()` is the hindsight copy of a multi-skill episode: the same steps under
the task's own goal, judged by the task's verdict, marked relabelled. `evaluate_composed` runs a
target env's evaluation suite through the library's plans with learned executors only.

`Embodiment.record(records, dataset_id)` appends episodes to a Minari dataset through
`baselines.datasets.write_episodes` (so `datasets.load` reads them for BC and IQL): `data/` plus the
`episodes.json` sidecar, whose record per episode (task, skill sequence, per-skill outcomes) is
also Minari's episode metadata. Per step the dataset holds the active sub-instruction's goal,
reward, success and actor; an episode's step flags are per skill: the last step of a skill is a
termination if the skill succeeded and a truncation if its budget ran out (so the flags, like
the goal, describe the active sub-task; at a truncated boundary the next observation already
carries the next skill's goal). The writer builds each new version in a staging folder and swaps
it in under a lock, so an interrupted append loses nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from minari.data_collector.episode_buffer import EpisodeBuffer

import gameon
from gameon.baselines.datasets import DatasetInfo, Episode, write_episodes
from gameon.envs import ENV_SKILLS, language, oracle
from gameon.envs.language import SKILLS, Instruction
from gameon.evaluation import EvalEpisode, EvalReport, evaluation_suite
from gameon.experimenter.skills import (
    Executor,
    LearnedExecutor,
    ScriptedExecutor,
    SkillLibrary,
    as_instruction,
    default_library,
)

DEFAULT_BUDGETS: dict[str, int] = {
    "reach": 60,
    "lift": 100,
    "push": 150,
    "place": 200,
    "stack": 200,
    "unstack": 200,
    "tower": 400,
}
"""Steps each skill may take before it counts as failed."""
MAX_EPISODE_STEPS = 2000
"""The env's time limit: a task's skill budgets must add up to no more."""
ACTORS = ("scripted", "learned", "coded")
"""Who may act in a step (`EpisodeRecord.actors` holds indices into this)."""
POLICY_NAME = "embodiment"
"""The `policy` of the embodiment's episodes in `episodes.json` (the experts' is "expert")."""


@dataclass
class SkillOutcome:
    """How one skill of a task went: the oracle's verdict, its steps and its summed reward."""

    skill: str
    instruction: str
    executor: str
    success: bool
    steps: int
    skill_return: float
    takeover: bool = False
    """the scripted expert ran this skill again after the learned policy failed it"""


@dataclass
class EpisodeRecord:
    """One executed task: its plan, per-skill outcomes, verdict and the buffers for Minari."""

    instruction: str
    skills: list[str]
    outcomes: list[SkillOutcome]
    success: bool
    steps: int
    episode_return: float
    seed: int
    noise_seed: int
    observations: dict[str, np.ndarray]
    """each key (T + 1, ...): the reset observation, then one per step"""
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    successes: np.ndarray
    """(T,) bool: the active skill's oracle verdict after each step"""
    actors: np.ndarray
    """(T,) uint8: who chose each step's action, an index into ACTORS (scripted, learned, coded)"""
    relabelled: bool = False
    """a hindsight copy: the steps of an executed plan, stored under the task's own goal"""

    @property
    def skill(self) -> str:
        """The grammar skill of the task itself."""
        return language.parse(self.instruction).skill

    @property
    def attempt_success(self) -> bool:
        """Whether the task succeeded without a scripted takeover: the executors' own result."""
        return self.success and not any(outcome.takeover for outcome in self.outcomes)

    @property
    def needs_relabel(self) -> bool:
        """Whether the steps ran under other goals than the task's (a plan of several skills)."""
        return not self.relabelled and self.skills != [self.instruction]

    def relabel(self) -> EpisodeRecord:
        """A hindsight copy: every step under the task's own goal, one segment judged by the
        task's verdict (reward 1 at the last step if the task succeeded), marked relabelled.

        The monolithic policy is evaluated on task goals (a tower), which a plan's steps never
        carry (each runs under its skill's goal, a stack); the copy puts them in the data.
        """
        goal = language.encode(language.parse(self.instruction))
        observations = {key: value.copy() for key, value in self.observations.items()}
        observations["goal"][:] = goal
        steps = len(self.actions)
        last = np.zeros(steps, bool)
        last[-1] = True
        return replace(
            self,
            outcomes=[
                SkillOutcome(
                    self.skill,
                    self.instruction,
                    "relabelled",
                    self.success,
                    steps,
                    float(self.success),
                )
            ],
            observations=observations,
            rewards=np.where(last & self.success, 1.0, 0.0),
            terminations=last & self.success,
            truncations=last & (not self.success),
            successes=last & self.success,
            relabelled=True,
        )

    def summary(self) -> dict[str, Any]:
        """The JSON record of `episodes.json`: the collect fields plus plan and outcomes."""
        return {
            "instruction": self.instruction,
            "skill": self.skill,
            "policy": POLICY_NAME,
            "seed": self.seed,
            "noise_seed": self.noise_seed,
            "success": self.success,
            "length": self.steps,
            "return": self.episode_return,
            "skill_sequence": list(self.skills),
            "outcomes": [asdict(outcome) for outcome in self.outcomes],
            "relabelled": self.relabelled,
            "actor_steps": self.actor_steps(),
        }

    def actor_steps(self) -> dict[str, int]:
        """How many steps each kind of actor chose (see ACTORS)."""
        return {actor: int(np.sum(self.actors == code)) for code, actor in enumerate(ACTORS)}

    def minari_metadata(self) -> dict[str, Any]:
        """The same record flattened into lists, as HDF5 attributes can hold it."""
        summary = self.summary()
        del summary["outcomes"], summary["actor_steps"]
        outcomes = self.outcomes
        summary["skill_executor"] = [o.executor for o in outcomes]
        summary["skill_success"] = np.array([o.success for o in outcomes], bool)
        summary["skill_steps"] = np.array([o.steps for o in outcomes], np.int64)
        summary["skill_return"] = np.array([o.skill_return for o in outcomes], np.float64)
        summary["skill_takeover"] = np.array([o.takeover for o in outcomes], bool)
        return summary

    def buffer(self, episode_id: int) -> EpisodeBuffer:
        return EpisodeBuffer(
            id=episode_id,
            seed=self.seed,
            options={"instruction": self.instruction},
            observations=self.observations,
            actions=self.actions,
            rewards=self.rewards,
            terminations=self.terminations,
            truncations=self.truncations,
            infos={"success": self.successes, "actor": self.actors},
        )


def _sub_seed(noise_seed: int, index: int) -> int:
    """An independent seed for the policy of the index-th skill of an episode."""
    return int(np.random.SeedSequence((noise_seed, index)).generate_state(1)[0])


def _budgets(overrides: Mapping[str, int] | None) -> dict[str, int]:
    budgets = dict(DEFAULT_BUDGETS)
    for skill, steps in (overrides or {}).items():
        if skill not in SKILLS:
            raise ValueError(
                f"unknown skill {skill!r} in skill_budget; accepted: {', '.join(SKILLS)}"
            )
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"skill_budget[{skill!r}] must be a positive integer, got {steps!r}")
        budgets[skill] = steps
    return budgets


@dataclass
class _Trace:
    """The steps of one episode as they are taken, across the skills of its plan."""

    observations: list[dict[str, np.ndarray]]
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)
    terminations: list[bool] = field(default_factory=list)
    truncations: list[bool] = field(default_factory=list)
    actors: list[int] = field(default_factory=list)
    ended: bool = False

    def add(
        self,
        observation: dict[str, np.ndarray],
        action: np.ndarray,
        reward: float,
        success: bool,
        actor: int,
    ) -> None:
        self.observations.append(observation)
        self.actions.append(action)
        self.rewards.append(reward)
        self.successes.append(success)
        self.terminations.append(False)
        self.truncations.append(False)
        self.actors.append(actor)


class Embodiment:
    """Runs tasks with a skill library in one env and records the episodes to Minari."""

    def __init__(
        self,
        env_id: str = "GameOn/MultiSkill-v0",
        library: SkillLibrary | None = None,
        skill_budget: Mapping[str, int] | None = None,
        atomic: bool = False,
        stop_on_failure: bool = False,
        max_episode_steps: int = MAX_EPISODE_STEPS,
        takeover: ScriptedExecutor | None = None,
    ) -> None:
        if env_id not in ENV_SKILLS:
            raise ValueError(f"unknown env id {env_id!r}; accepted: {', '.join(ENV_SKILLS)}")
        if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int):
            raise ValueError(
                f"max_episode_steps must be a positive integer, got {max_episode_steps!r}"
            )
        if max_episode_steps < 1:
            raise ValueError(
                f"max_episode_steps must be a positive integer, got {max_episode_steps}"
            )
        self.env_id = env_id
        self.library = default_library() if library is None else library
        self.budgets = _budgets(skill_budget)
        self.atomic = atomic
        self.stop_on_failure = stop_on_failure
        self.max_episode_steps = max_episode_steps
        self.takeover = takeover
        self.env = gym.make(env_id, max_episode_steps=max_episode_steps, terminate_on_success=False)

    def plan(self, task: str | Instruction) -> list[Instruction]:
        """The sub-instructions a task runs as, checked to have executors and to fit the limit."""
        return self.check_plan(task, self.library.decompose(task, atomic=self.atomic))

    def check_plan(self, task: str | Instruction, steps: list[Instruction]) -> list[Instruction]:
        """Return a task's steps once each has an executor and their budgets fit the limit."""
        for step in steps:
            self.library.executor_for(step)
        total = sum(self.budgets[step.skill] for step in steps)
        if total > self.max_episode_steps:
            raise ValueError(
                f"the skills of {as_instruction(task)} may take {total} steps, more than "
                f"max_episode_steps={self.max_episode_steps}; raise it or lower skill_budget"
            )
        return steps

    def execute(
        self,
        task: str | Instruction,
        seed: int,
        noise_seed: int | None = None,
        executor: Executor | None = None,
    ) -> EpisodeRecord:
        """Run a task's skills in one episode reset with `seed`; policies draw from noise_seed.

        With a `takeover` executor, a skill that a learned policy failed (its budget spent, the
        episode still running) is run again by the takeover with a fresh budget, so the plan can
        go on; those steps are labelled as the takeover's. With `executor`, every skill of the
        plan runs with it instead of its library executor (a demonstration of the task).
        """
        instruction = as_instruction(task)
        steps = self.plan(instruction)
        noise_seed = seed if noise_seed is None else noise_seed
        env, world = self.env, self.env.unwrapped
        observation, _ = env.reset(seed=seed, options={"instruction": instruction})
        episode_start = world.start_scene
        trace = _Trace([observation])
        outcomes: list[SkillOutcome] = []
        for index, step in enumerate(steps):
            trace.observations[-1] = world.set_instruction(step)
            step_executor = executor or self.library.executor_for(step)
            start = world.scene()
            sub_seed = _sub_seed(noise_seed, index)
            outcome = self._run_skill(trace, step, step_executor, start, sub_seed)
            outcomes.append(outcome)
            if not (outcome.success or trace.ended) and self._takes_over(step_executor):
                sub_seed = _sub_seed(noise_seed, len(steps) + index)
                outcome = self._run_skill(trace, step, self.takeover, start, sub_seed)
                outcomes.append(replace(outcome, takeover=True))
            if trace.ended or (self.stop_on_failure and not outcome.success):
                break
        keys = trace.observations[0].keys()
        return EpisodeRecord(
            instruction=str(instruction),
            skills=[str(step) for step in steps],
            outcomes=outcomes,
            success=oracle.success(instruction, world.scene(), episode_start),
            steps=len(trace.actions),
            episode_return=float(sum(trace.rewards)),
            seed=seed,
            noise_seed=noise_seed,
            observations={key: np.stack([o[key] for o in trace.observations]) for key in keys},
            actions=np.stack(trace.actions).astype(np.float32),
            rewards=np.asarray(trace.rewards, np.float64),
            terminations=np.asarray(trace.terminations, bool),
            truncations=np.asarray(trace.truncations, bool),
            successes=np.asarray(trace.successes, bool),
            actors=np.asarray(trace.actors, np.uint8),
        )

    def _takes_over(self, executor: Executor) -> bool:
        return self.takeover is not None and executor.kind == "learned"

    def _run_skill(
        self,
        trace: _Trace,
        step: Instruction,
        executor: Executor,
        start: oracle.SceneState,
        seed: int,
    ) -> SkillOutcome:
        """Act with one executor on one step until the oracle's success or its budget; the last
        step is a termination if it succeeded, else a truncation."""
        env, world = self.env, self.env.unwrapped
        policy = executor.policy(env, step, seed)
        actor = ACTORS.index(executor.kind)
        observation = trace.observations[-1]
        success, count, total = False, 0, 0.0
        try:
            while count < self.budgets[step.skill] and not (success or trace.ended):
                action = np.asarray(policy(observation), np.float32)
                observation, reward, terminated, truncated, _ = env.step(action)
                success = not truncated and oracle.success(step, world.scene(), start)
                trace.ended = terminated or truncated
                count, total = count + 1, total + float(reward)
                trace.add(observation, action, float(reward), success, actor)
        finally:
            if hasattr(policy, "close"):
                policy.close()  # a coded skill's sandbox process
        trace.terminations[-1], trace.truncations[-1] = success, not success
        return SkillOutcome(step.skill, str(step), executor.kind, success, count, total)

    def execute_many(
        self,
        tasks: Sequence[str | Instruction],
        seeds: Sequence[int],
        noise_seeds: Sequence[int] | None = None,
        progress: bool = False,
        callback: Callable[[EpisodeRecord], None] | None = None,
    ) -> list[EpisodeRecord]:
        """Execute tasks[i] with seeds[i]; an optional progress bar and per-episode callback."""
        if isinstance(tasks, (str, Instruction)):
            raise ValueError("tasks must be a list of instructions, not one instruction")
        noise_seeds = list(seeds) if noise_seeds is None else list(noise_seeds)
        if not len(tasks) == len(seeds) == len(noise_seeds):
            raise ValueError(
                f"give one seed per task: {len(tasks)} tasks, {len(seeds)} seeds, "
                f"{len(noise_seeds)} noise seeds"
            )
        records = []
        with contextlib.ExitStack() as stack:
            advance = None
            if progress:
                from rich.progress import Progress

                bar = stack.enter_context(Progress(transient=True))
                job = bar.add_task("executing", total=len(tasks))
                advance = lambda text: bar.update(job, advance=1, description=text)  # noqa: E731
            for task, seed, noise_seed in zip(tasks, seeds, noise_seeds, strict=True):
                record = self.execute(task, int(seed), int(noise_seed))
                records.append(record)
                if advance is not None:
                    wins = sum(r.success for r in records)
                    advance(f"{wins}/{len(records)} tasks done")
                if callback is not None:
                    callback(record)
        return records

    def record(
        self,
        records: Sequence[EpisodeRecord],
        dataset_id: str,
        datasets_path: str | Path | None = None,
        append: bool = True,
    ) -> Path:
        """Append episodes to a Minari dataset (created if missing); return its folder."""
        info = DatasetInfo(
            env_id=self.env_id,
            algorithm_name="gameon-embodiment",
            author="gameon-rl",
            code_permalink="gameon.experimenter.embodiment",
            description=(
                f"Tasks of {self.env_id} executed as sequences of skills from the skill "
                "library, each skill judged by the oracle."
            ),
            gameon={
                "env_id": self.env_id,
                "skills": list(ENV_SKILLS[self.env_id][0]),
                "source": POLICY_NAME,
                "gameon_version": gameon.__version__,
            },
        )
        episodes = [Episode(r.buffer(0), r.summary(), r.minari_metadata()) for r in records]
        existing = "append" if append else "refuse"
        try:
            return write_episodes(self.env, dataset_id, episodes, info, datasets_path, existing)
        except FileExistsError as error:
            raise FileExistsError(f"{error}; here: pass append=True to add to it") from None

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> Embodiment:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def evaluate_composed(
    library: SkillLibrary,
    env_id: str,
    episodes_per_skill: int,
    practice_env_id: str = "GameOn/MultiSkill-v0",
) -> EvalReport:
    """The composed policy on `env_id`'s shared suite: each task run as the library decomposes
    it, every step by a learned skill, in an env that accepts the steps (`practice_env_id`).

    A suite task resets to the same scene in any env (the layout depends on the instruction and
    the seed alone), so the episodes are comparable with a monolithic evaluation on `env_id`.
    A plan step without a learned executor is a ValueError: no scripted expert acts here.
    """
    suite = evaluation_suite(env_id, episodes_per_skill)
    episodes = []
    with Embodiment(practice_env_id, library, stop_on_failure=True) as embodiment:
        for task in suite:
            for step in embodiment.plan(task.instruction):
                kind = library.executor_for(step).kind
                if kind != "learned":
                    raise ValueError(
                        f"the composed evaluation runs learned skills only, but {step} "
                        f"({task.instruction}) has a {kind} executor"
                    )
            record = embodiment.execute(task.instruction, task.seed)
            episodes.append(
                EvalEpisode(
                    instruction=task.instruction,
                    skill=record.skill,
                    seed=task.seed,
                    success=record.success,
                    episode_return=record.episode_return,
                    length=record.steps,
                )
            )
    return EvalReport(env_id, tuple(episodes))


def learned_library(library: SkillLibrary, checkpoint: str | Path) -> SkillLibrary:
    """A copy of the library whose every non-macro skill runs the policy in `checkpoint`."""
    executor = LearnedExecutor(str(checkpoint))
    copy = SkillLibrary.from_dict(library.to_dict())
    for skill in copy:
        if not skill.is_macro:
            copy.replace_executor(skill.name, executor)
    return copy
