"""The vlm curriculum: a VLM (or its rules stand-in) picks the tasks, behind the Curriculum API.

The model is consulted every `interval` proposals (None: only when `consult()` is called, as
the collect loop does once per iteration), never per step; between consultations tasks are
sampled from its last proposal, tasks of skills the analysis called stalled at a lower weight.
A learning-progress curriculum over the same tasks hears every outcome in the background (the
learner's attempts and, through `update_evaluation`, its evaluation episodes; `group="skill"`
keeps its progress per skill, as the collect loop wants): when the model fails for good
(invalid answers after re-asks, HTTP errors, timeouts, rate limits) its choices are used until
the next consultation, and the fallback is counted. A request that got no answer at all (the
server down, timed out or refusing) also makes every later call of that consultation (plans,
analysis, skills) fall back unsent, so a dead server costs one timeout per consultation, not one
per call. A run never stops because of the model, but for settings the server refuses before it
has answered any call since the run started or resumed (an API key or a model it does not know:
HTTP 401, 403, 404, Gemini's 400 API_KEY_INVALID; a request it cannot take, any other 400, e.g.
images sent to a text-only model): `VLMRefused` then stops the run, since every
call would fail the same way; resumed with the setting fixed, it goes on from its last saved
iteration.

`usage()` totals the calls, tokens, estimated cost and fallbacks with the keys of
`gameon.records.VLMUsage`; results are labelled `vlm[rules]`, `vlm[replay]` or
`vlm[{backend}:{model}]` (`label`).

A spending cap (`max_cost`, USD per run): once the run's estimated spend (`spent()`, from the
price table) reaches it, every further module call falls back without sending a request, counted
in `fallbacks` and in `capped_calls`; a request of a call already under way (a re-ask) is not
sent either, so the spend passes the cap by at most the one request that reached it. A resumed
run counts the requests of an interrupted iteration too: they were billed and are in the
transcript, though the state that would have carried them was never saved.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gameon.envs.language import COLOURS, parse
from gameon.experimenter.curriculum import (
    Curriculum,
    CurriculumSetup,
    LearningProgressCurriculum,
    Outcome,
    _canonical_tasks,
    _check_state,
    canonical,
    skill_probabilities,
)
from gameon.experimenter.skills import Skill, SkillLibrary, default_library
from gameon.experimenter.vlm import modules
from gameon.experimenter.vlm.backend import (
    Backend,
    CostCapReached,
    ImageLike,
    Transcript,
    Usage,
    VLMError,
    VLMRefused,
    VLMUnreachable,
)
from gameon.experimenter.vlm.factory import cost_usd, make_backend, usd, vlm_label

log = logging.getLogger(__name__)
Camera = Callable[[int], ImageLike]
RECENT = 10
"""outcomes per task whose success rate the model sees as `recent_success`"""


class SceneCamera:
    """Renders the front camera's view of an env's scene as reset with a given seed."""

    def __init__(self, env_id: str, width: int = 160, height: int = 120) -> None:
        self.env_id, self.width, self.height = env_id, width, height
        self._env: Any = None

    def __call__(self, seed: int) -> np.ndarray:
        """The RGB image of the scene reset with `seed` (the env is built on first use)."""
        if self._env is None:
            import gymnasium as gym

            import gameon.envs  # noqa: F401  (registers the ids)

            self._env = gym.make(
                self.env_id,
                render_mode="rgb_array",
                camera="front",
                width=self.width,
                height=self.height,
            )
        self._env.reset(seed=int(seed))
        return self._env.render()

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


class VLMCurriculum(Curriculum):
    """Tasks proposed by a VLM backend, with a learning-progress fallback; see module doc."""

    name = "vlm"
    settings = (
        "vlm_backend",
        "vlm_model",
        "vlm_base_url",
        "vlm_timeout",
        "vlm_retries",
        "vlm_replay",
        "vlm_interval",
        "vlm_proposal_size",
        "vlm_add_skills",
        "vlm_verify_trials",
        "vlm_code_skills",
        "vlm_max_cost",
    )
    keeps_transcript = True
    experimenter = True

    def __init__(
        self,
        tasks: Sequence[str],
        backend: Backend,
        seed: int | None = 0,
        interval: int | None = 100,
        proposal_size: int = 4,
        library: SkillLibrary | None = None,
        camera: Camera | None = None,
        mastery: float = 0.8,
        stalled_weight: float = 0.25,
        group: str = "task",
        max_cost: float | None = None,
        **lp_options: Any,
    ) -> None:
        super().__init__(seed)
        amount = isinstance(max_cost, int | float) and not isinstance(max_cost, bool)
        if max_cost is not None and (not amount or not math.isfinite(max_cost) or max_cost <= 0):
            raise ValueError(
                f"max_cost must be a finite number of USD > 0 or None, got {max_cost!r}"
            )
        if interval is not None and (isinstance(interval, bool) or interval < 1):
            raise ValueError(f"interval must be >= 1 episodes or None, got {interval}")
        if proposal_size < 1:
            raise ValueError(f"proposal_size must be >= 1, got {proposal_size}")
        if not 0.0 < stalled_weight <= 1.0:
            raise ValueError(f"stalled_weight must be in (0, 1], got {stalled_weight}")
        self.tasks = _canonical_tasks(tasks)
        self.backend = backend
        self.interval = interval
        self.proposal_size = min(proposal_size, len(self.tasks))
        self.library = default_library() if library is None else library
        self.camera = camera
        self.mastery = float(mastery)
        self.stalled_weight = float(stalled_weight)
        self.lp = LearningProgressCurriculum(self.tasks, seed, group=group, **lp_options)
        self.proposal: list[str] = []
        self.rationale = ""
        self.source = "lp"
        self.since = 0
        self.consults = 0
        self.fallbacks = 0
        self.used_answers: int | None = 0
        """module calls whose answer was valid and used (None when resumed from a state saved
        before they were counted)"""
        self.unreachable = False
        """a request got no answer since the last consultation: calls fall back unsent until the
        next one, so a dead server costs one timeout per consultation, not one per call"""
        self.capped_calls = 0
        self.max_cost = None if max_cost is None else float(max_cost)
        self._base_spent = 0.0
        if self.max_cost is not None:
            backend.cost_cap = self.cap_reason
        self.outcomes: dict[str, list[bool]] = {task: [] for task in self.tasks}
        self.curves: dict[str, list[float]] = {}
        self.statuses: dict[str, str] = {}
        self.rejected: list[str] = []
        self.code_failures: dict[str, list[str]] = {}
        """per skill, why its earlier coded versions failed (shown to the fast agent)"""
        self._base = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}

    @classmethod
    def build(
        cls,
        tasks: Sequence[str] | None,
        seed: int | None = 0,
        *,
        budget: int | None = None,
        target_skills: Sequence[str] | None = None,
        **options: Any,
    ) -> VLMCurriculum:
        """Construct for `make_curriculum` with `make_vlm_curriculum` (which takes the backend
        by name); budget and target_skills are not read."""
        return make_vlm_curriculum(tasks, seed, **options)

    @classmethod
    def setup_options(cls, setup: CurriculumSetup) -> dict[str, Any]:
        """The caller's `vlm_options`, a scene camera on the env (unless they name another) and
        the caller's `group` for the background lp, if it gives one."""
        options = {"camera_env_id": setup.env_id, **dict(setup.vlm_options or {})}
        if setup.group is not None:
            options["group"] = setup.group
        return options

    @property
    def label(self) -> str:
        """How results of this curriculum are labelled: "vlm[rules]", "vlm[replay]", or the
        backend and its model, e.g. "vlm[gemini:gemini-2.5-flash]", so two models never pool."""
        return vlm_label(self.backend.name, self.backend.model)

    def use_library(self, library: SkillLibrary) -> None:
        """Describe the collect run's skill library to the model from now on (it grows)."""
        self.library = library

    # -- what the collect loop reports back ---------------------------------------------------

    def count_fallback(self) -> None:
        """Count a model answer the run could not use (e.g. a plan over the step limit)."""
        self.fallbacks += 1

    def reject_skill(self, name: str) -> None:
        """Remember a proposed macro skill that failed its verification (the model is told)."""
        self.rejected.append(name)

    def record_code_failure(self, skill: str, reason: str) -> None:
        """Remember why a coded version of `skill` failed (shown to the fast agent next time)."""
        self.code_failures.setdefault(skill, []).append(reason)

    # -- the model, with fallbacks ----------------------------------------------------------

    def spent(self) -> float:
        """The run's estimated spend in USD at the model's prices (a replay prices its recorded
        backend's tokens, so a replayed capped run stops where the original did)."""
        return self._base_spent + self._price(self.backend.total_usage)

    def _price(self, usage: Usage) -> float:
        """The usage in USD as the cap counts it: at the recorded backend's prices in a replay."""
        backend = self.backend
        name = getattr(backend, "recorded_backend", backend.name)
        return cost_usd(name, backend.model, usage)

    def _resumed_spend(self, saved: float) -> float:
        """The spend a resumed run counts against the cap: the saved spend, or what the
        transcript records if more (the requests of an interrupted iteration were billed
        though its state was never saved; the transcript holds every request of the run)."""
        transcript = self.backend.transcript
        if transcript is None:
            return saved
        return max(saved, self._price(transcript.usage()))

    def cap_reason(self) -> str | None:
        """Why no further request may be sent (the cost cap is spent), or None."""
        if self.max_cost is None:
            return None
        spent = self.spent()
        if spent < self.max_cost:
            return None
        return f"cost cap: {usd(spent)} spent of the {usd(self.max_cost)} cap"

    def fall_back_capped(self, module: str, reason: str) -> None:
        """Count a module call that the cost cap stopped unsent (a fallback, and a capped one)."""
        self.fallbacks += 1
        self.capped_calls += 1
        if self.capped_calls == 1:
            log.warning("vlm %s falls back, %s: later calls fall back unsent too", module, reason)

    def ask(self, module: str, call: Callable[[], Any]) -> Any | None:
        """Run one module call; None (and one more fallback) if the model failed for good or the
        cost cap is spent (then no request is sent and the fallback also counts as capped)."""
        reason = self.cap_reason()
        if reason is not None:
            self.backend.record_not_sent(module, reason)
            self.fall_back_capped(module, reason)
            return None
        if self.unreachable:
            self.fallbacks += 1
            return None
        answers = self.backend.valid_answers
        try:
            answer = call()
        except CostCapReached as error:
            self.fall_back_capped(module, str(error))
            return None
        except VLMUnreachable as error:
            if isinstance(error, VLMRefused) and self.backend.calls == 0:
                raise  # never answered since the run (re)started: the key or model is wrong
            self.fallbacks += 1
            self.unreachable = True
            log.warning(
                "vlm %s failed, falling back: %s; no further request until the next consultation",
                module,
                error,
            )
            return None
        except VLMError as error:
            self.fallbacks += 1
            log.warning("vlm %s failed, falling back: %s", module, error)
            return None
        if self.used_answers is not None and self.backend.valid_answers > answers:
            self.used_answers += 1  # not a step retrieved by parse or similarity, unasked
        return answer

    def task_stats(self) -> dict[str, dict[str, Any]]:
        """Per task: attempts, successes, recent success rate and learning progress."""
        progress = self.lp.progress()
        stats = {}
        for index, task in enumerate(self.tasks):
            outcomes = self.outcomes[task]
            recent = outcomes[-RECENT:]
            stats[task] = {
                "attempts": len(outcomes),
                "successes": int(sum(outcomes)),
                "recent_success": round(sum(recent) / len(recent), 4) if recent else None,
                "learning_progress": round(float(progress[index]), 4),
            }
        return stats

    def skill_stats(self) -> dict[str, dict[str, Any]]:
        """Per skill: practice attempts and successes, success (evaluated if known), status."""
        stats: dict[str, dict[str, Any]] = {}
        for task in self.tasks:
            entry = stats.setdefault(parse(task).skill, {"attempts": 0, "successes": 0})
            entry["attempts"] += len(self.outcomes[task])
            entry["successes"] += int(sum(self.outcomes[task]))
        for skill, entry in stats.items():
            curve = self.curves.get(skill)
            if curve:
                entry["success"] = round(float(curve[-1]), 4)
                entry["curve"] = [round(float(v), 4) for v in curve]
            elif entry["attempts"]:
                entry["success"] = round(entry["successes"] / entry["attempts"], 4)
            else:
                entry["success"] = None
            entry["status"] = self.statuses.get(skill)
        return stats

    def consult(self, scene_seed: int | None = None) -> bool:
        """Ask the model for the next tasks; on failure use lp until the next consultation."""
        seed = self.consults if scene_seed is None else scene_seed
        image = None if self.camera is None else self.camera(seed)
        self.consults += 1
        self.since = 0
        self.unreachable = False
        answer = self.ask(
            "propose",
            lambda: modules.propose_tasks(
                self.backend,
                self.tasks,
                self.task_stats(),
                self.skill_stats(),
                self.library,
                self.proposal_size,
                image,
                self.mastery,
            ),
        )
        if answer is None:
            self.proposal, self.rationale, self.source = [], "", "lp"
            return False
        self.proposal, self.rationale, self.source = list(answer.tasks), answer.rationale, "vlm"
        return True

    def plan(self, task: str, colours: Sequence[str]) -> modules.Plan:
        """Decompose a task and retrieve each step; an empty plan if the model failed."""
        answer = self.ask("decompose", lambda: modules.decompose(self.backend, task, self.library))
        if answer is None:
            return modules.Plan(canonical(task))
        plan = modules.Plan(canonical(task), rationale=answer.rationale)
        for step in answer.steps:
            plan.retrievals.append(self.retrieve(step, colours))
        return plan

    def retrieve(self, step: str, colours: Sequence[str]) -> modules.Retrieval:
        """Match a step to a library skill; once the cost cap is spent, by parse and similarity
        alone (no request), a step they cannot match counting as a capped fallback."""
        reason = self.cap_reason()
        if reason is not None:
            found = modules.retrieve(None, step, self.library, colours)
            if found.instruction is None:
                self.backend.record_not_sent("retrieve", reason)
                self.fall_back_capped("retrieve", reason)
                found.reason = reason
            return found
        found = self.ask(
            "retrieve", lambda: modules.retrieve(self.backend, step, self.library, colours)
        )
        if found is None:
            return modules.Retrieval(step, None, None, "unmatched", "the model failed")
        return found

    def analyse(self, curves: Mapping[str, Sequence[float]]) -> dict[str, str] | None:
        """Judge each skill's curve; remember the verdicts (stalled skills are sampled less)."""
        self.curves = {skill: [float(v) for v in values] for skill, values in curves.items()}
        verdicts = self.ask(
            "analyse", lambda: modules.analyse(self.backend, self.curves, self.mastery)
        )
        if verdicts is None:
            return None
        self.statuses = {skill: verdict.status for skill, verdict in verdicts.items()}
        return dict(self.statuses)

    def propose_skill(self, blocks: int = len(COLOURS)) -> tuple[Skill | None, str]:
        """Ask for a new macro skill for a scene of `blocks` blocks (not yet verified); (None, "")
        if the model failed."""
        answer = self.ask(
            "add_skill",
            lambda: modules.propose_skill(
                self.backend, self.library, self.skill_stats(), self.mastery, self.rejected, blocks
            ),
        )
        return (None, "") if answer is None else answer

    def decide_code_or_learn(self, coded: Mapping[str, float]) -> list[modules.SkillDecision]:
        """The slow agent: per skill, keep learning it or have it written as code; [] if the model
        failed. `coded` maps skills coded before to their verification success."""
        answer = self.ask(
            "code_or_learn",
            lambda: modules.decide_code_or_learn(
                self.backend, self.library, self.statuses, self.curves, coded
            ),
        )
        return [] if answer is None else list(answer.decisions)

    def write_code(self, skill: str) -> modules.CodedSkillAnswer | None:
        """The fast agent: the source of a coded `skill`, shown its earlier failures; None if
        the model failed."""
        from gameon.experimenter.coded_api import API_REFERENCE

        failures = self.code_failures.get(skill, [])
        return self.ask(
            "write_code",
            lambda: modules.write_skill_code(
                self.backend, self.library.get(skill), API_REFERENCE, failures
            ),
        )

    # -- the Curriculum interface -------------------------------------------------------------

    def _sample(self) -> str:
        weights = np.array(
            [
                self.stalled_weight if self.statuses.get(parse(t).skill) == "stalled" else 1.0
                for t in self.proposal
            ]
        )
        return self.proposal[int(self.rng.choice(len(self.proposal), p=weights / weights.sum()))]

    def propose(self) -> str:
        due = self.interval is not None and self.since >= self.interval
        if due or self.consults == 0:
            self.consult()
        self.since += 1
        if self.source == "lp" or not self.proposal:
            return self.lp.propose()
        return self._sample()

    def update(self, instruction: str, success: bool, episode_return: float) -> None:
        task = canonical(instruction)
        if task not in self.outcomes:
            return
        self.outcomes[task].append(bool(success))
        self.lp.update(task, success, episode_return)

    def update_evaluation(self, outcomes: Sequence[Outcome]) -> None:
        """Evaluation episodes feed the background lp only (the model sees the curves through
        `analyse`, and `outcomes` stays the practice history)."""
        self.lp.update_evaluation(outcomes)

    def brief(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "proposal": list(self.proposal),
            "source": self.source,
            "consults": self.consults,
            "skill_probabilities": skill_probabilities(self.lp),
        }

    def scalars(self) -> dict[str, float]:
        usage = self.usage()
        return {"vlm/calls": float(usage["calls"]), "vlm/fallbacks": float(usage["fallbacks"])}

    def usage(self) -> dict[str, Any]:
        """Calls, tokens, estimated cost (USD) and fallbacks: the keys of records.VLMUsage.

        They count the saved iterations' calls and this process's, so after a resume they leave
        out an interrupted iteration's requests, which `spent()` (the cap) still counts.
        """
        backend = self.backend
        usage = backend.total_usage
        return {
            "backend": backend.name,
            "model": backend.model,
            "calls": self._base["calls"] + backend.calls,
            "prompt_tokens": self._base["prompt_tokens"] + usage.prompt_tokens,
            "completion_tokens": self._base["completion_tokens"] + usage.completion_tokens,
            "cost_usd": round(
                self._base["cost_usd"] + cost_usd(backend.name, backend.model, usage), 6
            ),
            "fallbacks": self.fallbacks,
            "capped_calls": self.capped_calls,
            "used_answers": self.used_answers,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tasks": list(self.tasks),
            "rng": self._rng_state(),
            "lp": self.lp.state_dict(),
            "proposal": list(self.proposal),
            "rationale": self.rationale,
            "source": self.source,
            "since": self.since,
            "consults": self.consults,
            "outcomes": {task: list(values) for task, values in self.outcomes.items()},
            "curves": {skill: list(values) for skill, values in self.curves.items()},
            "statuses": dict(self.statuses),
            "rejected": list(self.rejected),
            "code_failures": {skill: list(why) for skill, why in self.code_failures.items()},
            "usage": self.usage(),
            "spent_usd": self.spent(),
            "endpoint": self._endpoint(),
        }

    def _endpoint(self) -> str:
        """A digest of where the backend's requests go (its name and resolved base URL, which
        OPENAI_BASE_URL or GOOGLE_GEMINI_BASE_URL may set): a digest, since a URL may carry
        credentials."""
        where = f"{self.backend.name} {getattr(self.backend, 'base_url', None) or ''}"
        return hashlib.sha256(where.encode()).hexdigest()[:16]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a saved state; the spend counted against the cap is rebuilt from the
        transcript when it records more than was saved (see `_resumed_spend`)."""
        _check_state(state, self.name, self.tasks)
        saved = state.get("endpoint")  # None in a state saved before it was kept
        if saved is not None and saved != self._endpoint():
            raise BackendSettingError(
                f"the run's {self.backend.name} requests went to another server than they would "
                "now: the base URL (--vlm-base-url, OPENAI_BASE_URL or GOOGLE_GEMINI_BASE_URL) "
                "changed since the run started, and one "
                "run's answers come from one server; set it back to resume, or start a new run"
            )
        self._load_rng_state(state["rng"])
        self.lp.load_state_dict(state["lp"])
        self.proposal = [canonical(task) for task in state["proposal"]]
        self.rationale = str(state["rationale"])
        self.source = str(state["source"])
        self.since, self.consults = int(state["since"]), int(state["consults"])
        self.outcomes = {task: [bool(v) for v in state["outcomes"][task]] for task in self.tasks}
        self.curves = {k: [float(v) for v in values] for k, values in state["curves"].items()}
        self.statuses = {str(k): str(v) for k, v in state["statuses"].items()}
        self.rejected = [str(name) for name in state["rejected"]]
        self.code_failures = {
            str(skill): [str(reason) for reason in reasons]
            for skill, reasons in state.get("code_failures", {}).items()
        }
        usage = state["usage"]
        self.fallbacks = int(usage["fallbacks"])
        used = usage.get("used_answers")
        self.used_answers = None if used is None else int(used)
        self.capped_calls = int(usage.get("capped_calls", 0))
        self._base = {key: usage[key] for key in self._base}
        self._base_spent = self._resumed_spend(float(state.get("spent_usd", usage["cost_usd"])))
        self.backend.calls, self.backend.total_usage = 0, Usage()

    def close(self) -> None:
        """Release the scene camera's renderer."""
        if isinstance(self.camera, SceneCamera):
            self.camera.close()


class BackendSettingError(ValueError):
    """A VLM backend setting that cannot work (its key, URL, model or transport), said as it is:
    it is no reason the curriculum cannot train on an env."""


def make_vlm_curriculum(
    tasks: Sequence[str] | None,
    seed: int | None = 0,
    backend: str | Backend = "rules",
    model: str | None = None,
    base_url: str | None = None,
    transcript: Transcript | str | Path | None = None,
    replay_path: str | Path | None = None,
    camera_env_id: str | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    **options: Any,
) -> VLMCurriculum:
    """A vlm curriculum over `tasks` with a backend given by name (see make_backend) or built.

    `transcript` is a Transcript or the run folder to write `transcript.jsonl` in (None: no
    transcript; a built backend brings its own); `camera_env_id` renders the scene image from
    that env's front camera unless a `camera` is given; `timeout` and `retries` are the
    backend's requests' (see make_backend). Other options go to VLMCurriculum (interval,
    proposal_size, ...).
    """
    if tasks is None:
        raise ValueError("the vlm curriculum needs tasks, e.g. task_set(env_id)")
    if isinstance(backend, str):
        if transcript is not None and not isinstance(transcript, Transcript):
            transcript = Transcript(transcript)
        try:
            backend = make_backend(
                backend, model, base_url, transcript, replay_path, timeout=timeout, retries=retries
            )
        except ValueError as error:
            raise BackendSettingError(str(error)) from None
    elif any(
        value is not None for value in (model, base_url, transcript, replay_path, timeout, retries)
    ):
        raise ValueError(
            "model, base_url, transcript, replay_path, timeout and retries only apply to a "
            "backend given by name; a built backend takes them when it is built, e.g. "
            "OpenAIBackend(model, transcript=Transcript(run_dir))"
        )
    if options.get("camera") is None and camera_env_id is not None:
        options["camera"] = SceneCamera(camera_env_id)
    return VLMCurriculum(tasks, backend, seed, **options)
