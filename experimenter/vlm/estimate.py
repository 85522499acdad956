"""What a run's VLM calls should cost, said before it runs: calls from the budget, prompt sizes
from the actual prompt files, dollars from the price table.

Calls per collect iteration (iteration 0, the seed data, asks nothing): propose 1, decompose one
per distinct task planned, retrieve only for a step the grammar and text similarity cannot
match, analyse 1, add_skill 1 (with `vlm_add_skills`), code_or_learn 1 and write_code per skill
to code (with `vlm_code_skills`). Typically: the proposal's tasks are planned, no step needs
the model, write_code once, no re-ask, every iteration runs. At most: a failed proposal leaves
every distinct task of the iteration to plan, every step of every plan is asked, every skill is
coded, and every call is re-asked `max_reasks` times. An online run consults propose once every
`vlm_interval` episodes: typically every episode runs to its step limit (`max_episode_steps`,
else the env's own); at most every episode lasts one step.

Tokens per call: the module's prompt rendered from `prompts/*.md` with a full context for the
run's task set (every task and skill with statistics, curves of every iteration), plus its JSON
schema, at CHARS_PER_TOKEN characters a token; each image counts the model's `image_tokens`
from prices.toml; the answer is assumed COMPLETION_TOKENS of the module plus the model's
`thinking_tokens` (both assumptions: no real model was run here).
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from gameon.envs import ENV_SKILLS
from gameon.envs.language import parse
from gameon.experimenter.vlm import modules
from gameon.experimenter.vlm.backend import Backend, Usage
from gameon.experimenter.vlm.factory import DEFAULT_MODELS, make_backend, prices, usd
from gameon.text import plural

PRICES_PATH = "experimenter/vlm/prices.toml"
PAID_BACKENDS = ("gemini", "openai")
CHARS_PER_TOKEN = 4
"""Gemini's and OpenAI's rule of thumb for English text; JSON may run a little denser"""
COMPLETION_TOKENS = {
    "propose": 150,
    "decompose": 100,
    "retrieve": 60,
    "analyse": 300,
    "add_skill": 200,
    "code_or_learn": 400,
    "write_code": 800,
}
"""assumed answer tokens per module (the rules stand-in's JSON answers are 15-170 tokens; a
model adds rationales)"""
IMAGE_TOKENS = 258
"""tokens an image counts when prices.toml gives no image_tokens (Gemini's figure for one tile)"""
REASK_TOKENS = 270
"""extra prompt tokens of a re-ask: the error shown (at most 1000 characters) and the request"""
MAX_REASKS = int(inspect.signature(make_backend).parameters["max_reasks"].default)
MODULES = tuple(COMPLETION_TOKENS)


class _Captured(Exception):
    """Raised by the capturing backend once it has the prompt (no answer is needed)."""


class _Capture(Backend):
    """A backend that only records each module's prompt size and image count."""

    def __init__(self) -> None:
        """No model, no transcript."""
        super().__init__("capture", "none")
        self.sizes: dict[str, tuple[int, int]] = {}

    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        """Never sends anything (generate is overridden)."""
        raise _Captured

    def generate(
        self,
        prompt: str,
        images: Sequence[Any],
        schema_model: type[BaseModel],
        module: str,
        validate: Any = None,
    ) -> Any:
        """Record the prompt and schema length in characters and the image count; stop."""
        schema = json.dumps(schema_model.model_json_schema())
        self.sizes[module] = (len(prompt) + len(schema), len(images))
        raise _Captured


@cache
def prompt_sizes(env_id: str, points: int) -> dict[str, tuple[int, int]]:
    """Characters (prompt and schema) and images of each module's request, rendered from the
    prompt files with a full context for env_id's tasks and curves of `points` points."""
    from gameon.experimenter.coded_api import API_REFERENCE
    from gameon.experimenter.curriculum import task_set
    from gameon.experimenter.skills import default_library

    tasks = task_set(env_id)
    library = default_library()
    skills = list(dict.fromkeys(parse(task).skill for task in tasks))
    colours = sorted({colour for task in tasks for colour in parse(task).objects})
    curves = {skill: [0.5] * max(1, points) for skill in skills}
    task_stats = {
        task: {"attempts": 10, "successes": 5, "recent_success": 0.5, "learning_progress": 0.1}
        for task in tasks
    }
    skill_stats = {
        skill: {"attempts": 10, "successes": 5, "success": 0.5, "curve": curves[skill]}
        for skill in skills
    }
    statuses = dict.fromkeys(skills, "improving")
    longest = max(tasks, key=len)
    capture = _Capture()
    image = b"png"
    calls = [
        lambda: modules.propose_tasks(
            capture, tasks, task_stats, skill_stats, library, 4, image, 0.8
        ),
        lambda: modules.decompose(capture, longest, library),
        lambda: modules.retrieve(capture, "do something else entirely", library, colours),
        lambda: modules.analyse(capture, curves),
        lambda: modules.propose_skill(capture, library, skill_stats),
        lambda: modules.decide_code_or_learn(capture, library, statuses, curves, {}),
        lambda: modules.write_skill_code(capture, library.get(skills[-1]), API_REFERENCE),
    ]
    for call in calls:
        with contextlib.suppress(_Captured):
            call()
    return dict(capture.sizes)


def module_counts(
    iterations: int,
    episodes_per_iteration: int,
    proposal_size: int,
    tasks: int,
    skills: int,
    add_skills: bool,
    code_skills: bool,
) -> tuple[dict[str, int], dict[str, int]]:
    """(typical, most) calls per module of a collect run; see the module docstring."""
    planned = min(proposal_size, episodes_per_iteration, tasks)
    planned_most = min(episodes_per_iteration, tasks)
    typical = {
        "propose": 1,
        "decompose": planned,
        "retrieve": 0,
        "analyse": 1,
        "add_skill": int(add_skills),
        "code_or_learn": int(code_skills),
        "write_code": int(code_skills),
    }
    most = {
        "propose": 1,
        "decompose": planned_most,
        "retrieve": planned_most * modules.MAX_STEPS,
        "analyse": 1,
        "add_skill": int(add_skills),
        "code_or_learn": int(code_skills),
        "write_code": skills * int(code_skills),
    }
    attempts = 1 + MAX_REASKS
    return (
        {module: count * iterations for module, count in typical.items()},
        {module: count * iterations * attempts for module, count in most.items()},
    )


@dataclass
class Estimate:
    """The model calls of one or more runs with one model, and what they should cost."""

    backend: str
    model: str
    runs: int = 0
    calls: int = 0
    """typical calls"""
    most_calls: int = 0
    """upper bound of calls (re-asks at their maximum)"""
    usd: float = 0.0
    most_usd: float = 0.0
    capped_usd: float = 0.0
    """the upper bound with each run's cost cap applied (equal to most_usd without caps)"""
    caps: tuple[float | None, ...] = ()

    @property
    def priced(self) -> bool:
        """Whether the price table lists the model (else its calls cost 0 in the records)."""
        return self.model in prices()

    def add(self, other: Estimate) -> None:
        """Add another run's estimate of the same model."""
        self.runs += other.runs
        self.calls += other.calls
        self.most_calls += other.most_calls
        self.usd += other.usd
        self.most_usd += other.most_usd
        self.capped_usd += other.capped_usd
        self.caps += other.caps

    def line(self) -> str:
        """One line, e.g. "vlm: gemini-2.5-flash, about 21 calls (at most 630) in 1 run, about
        $0.04 (at most $1.20) at the prices in experimenter/vlm/prices.toml"."""
        runs = plural(self.runs, "run")
        head = (
            f"vlm: {self.model} ({self.backend}), about {self.calls} calls "
            f"(at most {self.most_calls}) in {runs}"
        )
        if not self.priced:
            return f"{head}; {self.model} has no price in {PRICES_PATH}, so it is counted as $0"
        text = f"{head}, about {usd(self.usd)} (at most {usd(self.most_usd)})"
        caps = sorted({cap for cap in self.caps if cap is not None})
        if caps:
            cap = ", ".join(usd(value) for value in caps)
            uncapped = sum(cap is None for cap in self.caps)
            text += f", capped at {cap} a run" + (f" ({uncapped} uncapped)" if uncapped else "")
            if self.capped_usd < self.most_usd:
                text += f": at most {usd(self.capped_usd)}"
        else:
            text += ", no cost cap"
        return f"{text}, at the prices in {PRICES_PATH}"


def assumptions() -> str:
    """How the estimate is made, in one line (printed under the estimate)."""
    answers = f"{min(COMPLETION_TOKENS.values())}-{max(COMPLETION_TOKENS.values())}"
    return (
        f"  (prompts measured from experimenter/vlm/prompts at {CHARS_PER_TOKEN} characters a "
        f"token, answers assumed {answers} tokens a module plus the model's thinking tokens; "
        f"typical: no re-ask, no step retrieved by the model; at most: {MAX_REASKS} re-asks "
        "per call, every step retrieved by the model, no early stop)"
    )


def _call_usd(model: str, module: str, characters: int, images: int, reask: bool) -> float:
    """Estimated USD of one request of a module."""
    price = prices().get(model)
    if price is None:
        return 0.0
    prompt = characters / CHARS_PER_TOKEN + images * price.get("image_tokens", IMAGE_TOKENS)
    prompt += REASK_TOKENS if reask else 0
    completion = COMPLETION_TOKENS[module] + price.get("thinking_tokens", 0)
    return (prompt * price["prompt"] + completion * price["completion"]) / 1e6


def _priced(
    backend: str,
    model: str,
    sizes: dict[str, tuple[int, int]],
    typical: dict[str, int],
    most: dict[str, int],
    cap: float | None,
) -> Estimate:
    """An Estimate of one run from its calls per module and the prompt sizes."""
    usd = sum(typical[m] * _call_usd(model, m, *sizes[m], reask=False) for m in typical)
    most_usd = sum(most[m] * _call_usd(model, m, *sizes[m], reask=True) for m in most)
    return Estimate(
        backend,
        model,
        runs=1,
        calls=sum(typical.values()),
        most_calls=sum(most.values()),
        usd=usd,
        most_usd=most_usd,
        capped_usd=most_usd if cap is None else min(most_usd, cap),
        caps=(cap,),
    )


def collect_estimate(config: Any) -> Estimate | None:
    """The estimate of a collect run (a LoopConfig); None unless it asks a paid backend."""
    if config.curriculum != "vlm" or config.vlm_backend not in PAID_BACKENDS:
        return None
    from gameon.experimenter.curriculum import task_set
    from gameon.experimenter.skills import default_library

    model = config.vlm_model or DEFAULT_MODELS[config.vlm_backend]
    skills = sum(not skill.is_macro for skill in default_library())
    typical, most = module_counts(
        config.iterations,
        config.episodes_per_iteration,
        config.vlm_proposal_size,
        len(task_set(config.practice_env_id)),
        skills,
        config.vlm_add_skills,
        config.vlm_code_skills,
    )
    sizes = prompt_sizes(config.practice_env_id, config.iterations + 1)
    return _priced(
        config.vlm_backend, model, sizes, typical, most, getattr(config, "vlm_max_cost", None)
    )


def online_estimate(args: Any) -> Estimate | None:
    """The estimate of an online run (ppo/sac Args); None unless it asks a paid backend."""
    if args.curriculum != "vlm" or args.vlm_backend not in PAID_BACKENDS:
        return None
    model = args.vlm_model or DEFAULT_MODELS[args.vlm_backend]
    num_envs = int(getattr(args, "num_envs", 1))
    steps = int(args.total_timesteps)
    limit = getattr(args, "max_episode_steps", None) or ENV_SKILLS[args.env_id][1]
    episodes = -(-steps // limit) + num_envs
    most_episodes = steps + num_envs
    typical = dict.fromkeys(MODULES, 0) | {"propose": 1 + (episodes - 1) // args.vlm_interval}
    most = dict.fromkeys(MODULES, 0)
    most["propose"] = (1 + (most_episodes - 1) // args.vlm_interval) * (1 + MAX_REASKS)
    sizes = prompt_sizes(args.env_id, 1)
    return _priced(
        args.vlm_backend, model, sizes, typical, most, getattr(args, "vlm_max_cost", None)
    )


def combine(estimates: Sequence[Estimate | None]) -> list[Estimate]:
    """Sum the estimates per (backend, model), in order of first appearance."""
    totals: dict[tuple[str, str], Estimate] = {}
    for estimate in estimates:
        if estimate is None:
            continue
        key = (estimate.backend, estimate.model)
        if key not in totals:
            totals[key] = Estimate(estimate.backend, estimate.model)
        totals[key].add(estimate)
    return list(totals.values())


def estimate_lines(estimates: Sequence[Estimate | None]) -> list[str]:
    """The lines to print before a run or a matrix (none if no paid backend is asked)."""
    combined = combine(estimates)
    if not combined:
        return []
    return [*(estimate.line() for estimate in combined), assumptions()]
