"""The collect protocol (the Game On cycle): practise, record, retrain, evaluate, repeat.

    python -m gameon.cli experiment --env-id GameOn/Tower-v0 --curriculum lp --learner bc

Protocol v2 (the default, `collector` learned, mixed or demo): the learner collects its own data, so
a curriculum is judged by what its choices teach. Iteration 0 records a seed dataset of noisy
scripted-expert episodes (a skill of the practice env drawn uniformly, then one of its
instructions; the same for every curriculum of a seed), trains the offline learner on it and
evaluates it per skill. Every later iteration:

1. the curriculum proposes `episodes_per_iteration` tasks of the practice env;
2. the embodiment runs each one as the skill library decomposes it (a tower as its stacks),
   every skill by the latest learned policy conditioned on that skill's goal; with the `mixed`
   collector the scripted expert takes over a skill the policy failed, so the plan can go on
   (those steps are labelled scripted); with the `demo` collector the attempt stops at its first
   failed skill and the scripted expert then demonstrates the whole task from the same start
   (a separate episode, labelled scripted). The oracle judges every skill and the task;
3. the learner's own outcomes (a task counts as done only without a takeover) update the
   curriculum;
4. the episodes, successes and failures alike with the oracle's rewards, join the dataset; a
   multi-skill episode is also stored once more under the task's own goal, marked relabelled
   (hindsight relabelling), so the monolithic policy sees the goals it is evaluated on;
5. the learner (BC on the successful skill segments, or IQL on everything) trains on all of it
   for `num_updates` steps, with action chunking (`chunk_length`), continuing from the previous
   iteration's policy (`warm_start`, the default) or from scratch;
6. the policy is evaluated per skill on the evaluation env's shared suite; those outcomes update
   the curriculum too (`update_evaluation`), and the curves grow.

When the run ends, the final policy is evaluated on the target env's suite (and
`report_env_id`'s) with `target_eval_episodes` per skill, twice: monolithic (conditioned on the
task's goal) and composed (the run's skill library decomposes each task and the learned policy
runs every step; no scripted executor anywhere). The record carries both; the composed one
ranks.

Protocol v1 (`collector = "expert"`): the scripted experts run every skill until its
evaluation passes `promote_threshold`, and then the learned policy runs it (privileged data).

With the `vlm` curriculum (`vlm_backend`: rules | gemini | openai | replay) the model is consulted
once per iteration (`experimenter/vlm/collect.py`): it proposes the tasks from an image of the
iteration's first scene and the success history, decomposes each into library skills (the
embodiment runs those plans), and after retraining analyses the per-skill curves (stalled skills
are sampled less; under protocol v1 a skill is promoted only once its curve is judged
converged), and a macro skill it proposes joins the library after the oracle verifies it on
seeded trials. Every call is in `transcript.jsonl`; the committed state carries the usage
(`CollectState.vlm`, the keys of `gameon.records.VLMUsage`) and the label
(`CollectState.curriculum_label`, e.g. "vlm[rules]").

The run stops after `iterations` iterations, or as soon as every skill of the target env reaches
`stop_threshold` in an evaluation. Everything random derives from (`seed`, iteration): the same
seed gives the same run, whether it ran through or was killed and resumed.

Files in the run folder:

- `state.json`: the committed state, rewritten atomically after every iteration and once more
  with the final target evaluations (`targets`); the paths in it are relative to the run folder,
  so a moved run folder resumes with its own files;
- `datasets/iter_{k}/`: the Minari datasets root holding `gameon/collect-v0` as committed by
  iteration k (only the latest committed one is kept);
- `policies/iter_{k}/`: the learner's checkpoint, logs and evaluation of iteration k;
- `record.json` (the run record) and `curves.png` (per-skill success per iteration).
- vlm only: `transcript.jsonl` and `images/` (every model call, keys scrubbed).

Resume and "nothing lost, nothing twice": the dataset of iteration k is a copy of iteration k-1's
plus the new episodes, in its own root `datasets/iter_{k}`. The state names the root it committed,
so the moment `state.json` is replaced is the single commit point of an iteration: before it, the
committed state still names the previous, untouched dataset; after it, the new one. On start, any
dataset root or policy folder that the state does not name as committed (the leftovers of an
interrupted iteration, or the previous root whose deletion was interrupted) is removed and the
interrupted iteration runs again from its seeds, so it collects exactly the episodes it would have.
A finished run started again with more `iterations` goes on from its last commit (the hand
curriculum keeps the stage windows it started with; the state and the record keep the
iterations the run started with, `start_iterations`, so the audit re-runs it the same way); its
record is moved aside to `record_after_iteration_{k}.json` once the state has loaded (no report
counts it there, and an interrupted extension does not lose it), and `record.json` is written
anew when the added iterations end. A run that `auto_stop` ended as
mastered stays stopped while auto_stop is on (asked for more iterations, it says so on stderr);
resumed with auto_stop off, it goes on. Besides `iterations` and `auto_stop`, a resumed run may
change how requests are sent (`vlm_timeout`, `vlm_retries`) and the settings its curriculum does
not read (e.g. the VLM backend of a non-vlm run); any other change is refused (`hand_curriculum`
may name the same stages file another way, or from another folder). The state's
`wall_seconds` counts each committed iteration and the final evaluations once (a final
evaluation that an extension superseded is not counted).

Bad files: the state also commits the sha256 of every file the next iteration reads (the dataset
root's files, the policy checkpoints; `files`). On start, a committed file that is missing or
changed (a truncated HDF5 file or checkpoint), or, in a state from before the hashes were kept,
one that does not load, is reported on stderr with its path, and the run is re-done from its
last good commit: iteration 0, since only the latest commit's dataset is kept. The same seeds
give the same run. The run's previous files are moved to `bad_files/<time>/`, never deleted,
and `bad_files/report.json` (and the record's `extra["bad_files"]`) says what was found.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import math
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import ValidationError

from gameon.atomic import atomic_write, file_lock
from gameon.envs import ENV_SKILLS
from gameon.envs.language import parse
from gameon.envs.stacking_env import check_gl_backend
from gameon.evaluation import SUITE_SEED
from gameon.experimenter.curricula import (
    CURRICULA,
    check_curriculum_settings,
    curriculum_class,
    curriculum_for_env,
)
from gameon.experimenter.curriculum import (
    Curriculum,
    Outcome,
    curriculum_brief,
    curriculum_label,
    target_chain,
    task_set,
    tasks_by_skill,
    vlm_usage,
)
from gameon.experimenter.sandbox import namespace_command
from gameon.experimenter.skills import (
    ScriptedExecutor,
    SkillLibrary,
    default_library,
    promote_all,
    promote_by_rate,
)
from gameon.experimenter.vlm.backend import TRANSCRIPT_FILE, mark_abandoned, read_entries
from gameon.experimenter.vlm.factory import (
    DEFAULT_MODELS,
    FREE_BACKENDS,
    PRICES_TOML,
    check_transport,
    prices,
)
from gameon.integrity import (
    BadFile,
    check_checkpoint,
    check_dataset,
    check_hashes,
    file_sha256,
    folder_files,
    git_commit,
    platform_info,
    versions,
)
from gameon.plots import skill_curves_png
from gameon.records import (
    RECORD_FILE,
    Collected,
    CurvePoint,
    Evaluation,
    RunRecord,
    StrictModel,
    TargetEvaluation,
    Training,
    VLMUsage,
    build_record,
    write_record,
)
from gameon.text import plural

if TYPE_CHECKING:  # minari is imported only when a run starts
    from gameon.experimenter.embodiment import Embodiment, EpisodeRecord

STATE_FORMAT = "gameon-collect-state-v3"
"""v3: collectors, relabelling, the final target evaluations (`targets`)."""
DATASET_ID = "gameon/collect-v0"
"""Minari id of the run's dataset (inside each `datasets/iter_{k}` root)."""
LEARNERS = ("bc", "iql")
COLLECTORS = ("learned", "mixed", "demo", "expert")
BAD_FILES_DIR = "bad_files"
"""Where a run whose committed files are bad keeps them (see the module docstring)."""
BAD_FILES_LOG = "report.json"
"""In BAD_FILES_DIR: what each re-done start found (`bad_file_reports`)."""
UNREADABLE_LOG = "unreadable_log"
"""The key of the entry that stands for a BAD_FILES_LOG which does not read as one."""
RUN_LOCK_FILE = ".run.lock"
"""Held by the process running in a folder (`claim_run_folder`)."""
KEPT_ON_REDO = ("run.json", "run.log", "error.txt", BAD_FILES_DIR, RUN_LOCK_FILE)
"""What stays in a run folder that is re-done: the runner's files, earlier bad files and the
lock of the run re-doing it."""
STARTED_FILE = "started.json"
"""Written when a run starts in a folder: a folder without it or a committed state is not a run,
so nothing in it is removed (an uncommitted iteration's files are, in a run's own folder)."""
RESUMABLE_CHANGES = ("iterations", "auto_stop", "vlm_timeout", "vlm_retries")
"""Config fields a resumed run may change: its budget, whether it stops once mastered (which
decides only when the run ends, never what an iteration does), and how patiently requests are
sent. Besides these, a setting the run's curriculum does not read may change (`unread_settings`:
e.g. vlm_backend of a fixed or lp run)."""
SEED_LOW, SEED_HIGH = 2**20, 2**31
"""Episode reset seeds come from this range, far from the evaluation suite's (10_000 + i)."""


class DatasetRef(StrictModel):
    """The run's dataset as a state commits it."""

    id: str
    root: str
    """the Minari datasets root, relative to the run folder (`datasets/iter_{k}`)"""
    episodes: int
    """the episodes in the dataset, hindsight-relabelled copies included"""


class CollectState(StrictModel):
    """What `state.json` commits after each iteration: enough to resume the run exactly.

    `history` holds one report per iteration (tasks, seeds, outcomes, actors, evaluation, the
    curriculum's brief, the vlm's decisions, seconds); `files` the sha256 of every file the
    state relies on, checked on resume.
    """

    format: Literal["gameon-collect-state-v3"] = STATE_FORMAT
    config: dict[str, Any]
    """the LoopConfig, as asdict gives it"""
    iteration: int
    """the last committed iteration (0: the seed data)"""
    stopped: str | None
    """"mastered" once auto_stop ended the run early, else None"""
    curriculum: dict[str, Any]
    """the curriculum's state_dict"""
    library: dict[str, Any]
    """the skill library (SkillLibrary.to_dict), learned checkpoints relative to the run folder"""
    curves: dict[str, list[float]]
    """per skill, evaluated success per iteration"""
    history: list[dict[str, Any]]
    dataset: DatasetRef
    policy: str
    """the latest checkpoint, relative to the run folder"""
    evaluation: dict[str, Any]
    """the latest evaluation (EvalReport.to_dict)"""
    targets: list[dict[str, Any]] | None
    """the final target evaluations (monolithic and composed), once made"""
    curriculum_label: str
    vlm: dict[str, Any]
    """the curriculum's VLM usage (the keys of gameon.records.VLMUsage)"""
    seed: int
    wall_seconds: float
    """seconds of the work this state holds, each piece counted once: every committed
    iteration's own seconds (collect, record, train, evaluate: `history[k]["seconds"]`) and,
    once made, the final target evaluations (`targets`). Not counted: an interrupted
    iteration's work (it is re-done and counted then), a final evaluation that an extension by
    more iterations superseded (the extended run's own final evaluation replaces it), the time
    between starts of a resumed run, and the checks and commits around the iterations."""
    files: dict[str, str] | None = None
    """sha256 by path relative to the run folder (None in states made before hashes)"""
    transcript_entries: int | None = None
    """calls in transcript.jsonl at this commit: a resumed run marks those after them as
    abandoned, so a replay skips them (None in states made before this count)"""
    start_iterations: int | None = None
    """the iterations the run was started with: its curriculum's budget was sized from them
    (hand's `window_share` windows), and a run extended with more iterations keeps that budget,
    so the record carries them for the audit to re-run it as it was made (None in states made
    before this was kept, and in the runs extended from them)"""
    hand_curriculum_file: str | None = None
    """the hand curriculum's stages file (`config["hand_curriculum"]`) as an absolute path, so a
    resume may name the same file another way, from any folder (None where no file was given,
    and in states made before this was kept)"""

    def write(self, path: Path) -> None:
        """Write the state atomically as indented JSON."""
        atomic_write(path, json.dumps(self.model_dump(), indent=2) + "\n")


@dataclass
class LoopConfig:
    """What one collect run does; the same config and seed give the same run."""

    env_id: str = "GameOn/Tower-v0"
    """target env: the run is done when every skill of its tasks is mastered"""
    practice_env_id: str = "GameOn/MultiSkill-v0"
    """env whose tasks the curriculum proposes and the embodiment runs (must cover the target's)"""
    eval_env_id: str | None = None
    """env whose suite evaluates each skill (None: the practice env, so every skill gets a curve)"""
    curriculum: str = "lp"
    """curriculum over the practice env's tasks (see CURRICULA: fixed, hand, lp, vlm and the
    positive and negative controls)"""
    learner: Literal["bc", "iql"] = "bc"
    """offline learner retrained on the whole dataset every iteration"""
    collector: Literal["learned", "mixed", "demo", "expert"] = "learned"
    """who acts in the collected episodes after iteration 0: learned (the latest policy runs every
    skill), mixed (the latest policy, and the scripted expert takes over a skill it failed, those
    steps labelled scripted), demo (the latest policy until its first failed skill, then the
    scripted expert demonstrates the whole task from the same start, as a separate episode) or
    expert (protocol v1: scripted experts until a skill's evaluation passes promote_threshold;
    privileged data)"""
    relabel: bool = True
    """also store each multi-skill episode under the task's own goal (hindsight relabelling)"""
    chunk_length: int = 8
    """actions the offline learner predicts per observation (action chunking; 1: none)"""
    warm_start: bool = True
    """each iteration's learner continues from the previous iteration's policy for num_updates
    more gradient steps (its actor and normaliser), instead of starting afresh"""
    target_eval_episodes: int = 20
    """episodes per target skill of the final evaluations on the target env's suite, of the
    monolithic policy (task goal) and of the composed one (the library's plan, learned skills)"""
    report_env_id: str | None = None
    """a second target env evaluated at the end as the target is, e.g. GameOn/Stack-v0"""
    seed: int = 0
    """seed of everything: curriculum, episode seeds, expert noise and the learner"""
    iterations: int = 5
    """collect iterations after iteration 0 (the seed dataset)"""
    episodes_per_iteration: int = 20
    """tasks the curriculum proposes and the embodiment runs per iteration"""
    seed_episodes: int = 50
    """tasks of the seed dataset, run by the noisy scripted experts: a skill of the practice env
    drawn uniformly, then one of its instructions"""
    seed_noise: float = 0.1
    """std of the scripted experts' action noise (seed dataset and skills not yet promoted)"""
    num_updates: int = 5_000
    """gradient steps of each iteration's training on the whole dataset (continuing from the
    previous iteration's policy unless warm_start is off)"""
    eval_episodes_per_skill: int = 10
    """episodes per skill of the evaluation after each iteration"""
    promote_threshold: float = 0.8
    """a skill whose evaluated success reaches this runs with the learned policy"""
    stop_threshold: float = 0.9
    """the run stops when every target skill's evaluated success reaches this"""
    auto_stop: bool = True
    """stop early once the target skills are mastered (otherwise run every iteration); may change
    on resume: a run it stopped as mastered goes on once resumed with auto_stop off"""
    hand_curriculum: str | None = None
    """hand curriculum: its stages file (None: the shipped experimenter/hand_curriculum.toml)"""
    vlm_backend: str = "rules"
    """vlm curriculum: rules (offline stand-in, labelled vlm[rules]) | gemini | openai | replay"""
    vlm_model: str | None = None
    """vlm curriculum: the model (default gemini-2.5-flash for gemini, gpt-4o-mini for openai)"""
    vlm_base_url: str | None = None
    """vlm curriculum: server URL, e.g. http://localhost:11434/v1 for Ollama (openai backend)"""
    vlm_timeout: float | None = None
    """vlm curriculum, gemini and openai: seconds of waiting with nothing from the server (to
    connect, or between parts of its answer) before a request is retried (None: 30; a local
    server on a small GPU may need minutes)"""
    vlm_retries: int | None = None
    """vlm curriculum, gemini and openai: retries of a request that failed in transport (None: 3)"""
    vlm_replay: str | None = None
    """vlm curriculum, replay backend: the transcript.jsonl (or run folder) to replay"""
    vlm_proposal_size: int = 4
    """vlm curriculum: tasks the model proposes per iteration (episodes are sampled from them)"""
    vlm_add_skills: bool = True
    """vlm curriculum: let the model propose macro skills, verified by the oracle"""
    vlm_verify_trials: int = 3
    """vlm curriculum: seeded trials a proposed macro or coded skill must pass (promote_threshold
    of them)"""
    vlm_code_skills: bool = False
    """vlm curriculum: after each analysis the slow agent may have skills written as code (the
    fast agent writes them, the sandbox runs them, the oracle verifies them; after RL-GPT)"""
    vlm_max_cost: float | None = None
    """vlm curriculum: spending cap in USD for this run, at the prices of
    experimenter/vlm/prices.toml; once the estimated spend reaches it, every further model call
    falls back to learning progress without a request (counted as capped_calls)"""

    def validate(self) -> None:
        """Raise ValueError naming the first bad field and what it accepts."""
        if self.seed < 0:
            raise ValueError(
                f"seed must be >= 0 (numpy's generators take no negative seed), got {self.seed}"
            )
        for name in ("env_id", "practice_env_id", "eval_env_id", "report_env_id"):
            value = getattr(self, name)
            optional = name in ("eval_env_id", "report_env_id")
            if value not in ENV_SKILLS and not (optional and value is None):
                raise ValueError(f"unknown {name} {value!r}; accepted: {', '.join(ENV_SKILLS)}")
        if self.curriculum not in CURRICULA:
            raise ValueError(
                f"unknown curriculum {self.curriculum!r}; accepted: {', '.join(CURRICULA)}"
            )
        if self.learner not in LEARNERS:
            raise ValueError(f"unknown learner {self.learner!r}; accepted: {', '.join(LEARNERS)}")
        if self.collector not in COLLECTORS:
            raise ValueError(
                f"unknown collector {self.collector!r}; accepted: {', '.join(COLLECTORS)}"
            )
        targets = [self.env_id, *([self.report_env_id] if self.report_env_id else [])]
        for role, env_id in (("practice", self.practice_env_id), ("eval", self.eval_env)):
            for target in targets:
                missing = [s for s in ENV_SKILLS[target][0] if s not in ENV_SKILLS[env_id][0]]
                if missing:
                    raise ValueError(
                        f"{role} env {env_id} lacks the target skills {missing} of {target}; "
                        "use GameOn/MultiSkill-v0"
                    )
        check_practice_plans(self.practice_env_id)
        if self.curriculum == "vlm":
            check_gl_backend()  # its camera images: found now, not after iteration 0
        if self.curriculum == "positive_control":
            check_control_evaluation(self.eval_env, self.target_skills)
        minimums = {
            "iterations": 0,
            "episodes_per_iteration": 1,
            "seed_episodes": 1,
            "num_updates": 1,
            "eval_episodes_per_skill": 1,
            "chunk_length": 1,
            "target_eval_episodes": 1,
        }
        for name, low in minimums.items():
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be >= {low}, got {getattr(self, name)}")
        check_curriculum_settings(
            self.curriculum,
            {
                name: getattr(self, name)
                for name in (
                    "hand_curriculum",
                    "vlm_model",
                    "vlm_base_url",
                    "vlm_timeout",
                    "vlm_retries",
                    "vlm_replay",
                    "vlm_code_skills",
                    "vlm_max_cost",
                )
            },
        )
        if self.iterations == 0 and curriculum_class(self.curriculum).reads_budget:
            raise ValueError(
                f"iterations 0 leaves the {self.curriculum} curriculum no episodes to size its "
                "stages by (it reads the run's budget): give iterations >= 1"
            )
        longest = max(max_steps for _, max_steps in ENV_SKILLS.values())
        if self.chunk_length > longest:
            raise ValueError(
                f"chunk_length must be at most {longest} steps (the longest episode), got "
                f"{self.chunk_length}"
            )
        for name in ("vlm_proposal_size", "vlm_verify_trials"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        check_transport(self.vlm_backend, self.vlm_timeout, self.vlm_retries)
        if self.vlm_code_skills:
            try:
                namespace_command()
            except RuntimeError as error:  # found now, not after the seed data and training
                raise ValueError(f"vlm_code_skills needs a sandbox: {error}") from None
        check_max_cost(self.vlm_max_cost, self.curriculum, self.vlm_backend, self.vlm_model)
        make_loop_curriculum(self)  # e.g. hand's stages need a practice env that has them;
        # the vlm backend needs its key (gemini) or transcript (replay)
        if not math.isfinite(self.seed_noise) or self.seed_noise < 0:
            raise ValueError(f"seed_noise must be a number >= 0, got {self.seed_noise}")
        if self.report_env_id == self.env_id:
            raise ValueError(
                f"report_env_id {self.report_env_id} is the target env_id, which is evaluated "
                "anyway; give another env or leave report_env_id unset"
            )
        for name in ("promote_threshold", "stop_threshold"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    @property
    def eval_env(self) -> str:
        """The env whose suite evaluates the policy."""
        return self.eval_env_id or self.practice_env_id

    @property
    def target_skills(self) -> tuple[str, ...]:
        """The skills of the target env's tasks."""
        return ENV_SKILLS[self.env_id][0]


def check_practice_plans(practice_env_id: str) -> None:
    """ValueError unless the practice env accepts every skill its tasks are run as (the skill
    library runs a tower as its stacks, so a tower-only env cannot practise)."""
    library = default_library()
    steps = {step.skill for task in task_set(practice_env_id) for step in library.decompose(task)}
    refused = sorted(steps - set(ENV_SKILLS[practice_env_id][0]))
    if refused:
        raise ValueError(
            f"practice env {practice_env_id} does not accept {', '.join(refused)}, which its "
            "tasks are run as (the skill library runs a tower as its stacks); the practice env "
            "must accept every skill its tasks are run as: GameOn/MultiSkill-v0 accepts them all"
        )


def check_control_evaluation(eval_env_id: str, target_skills: Sequence[str]) -> None:
    """ValueError unless the eval env evaluates every skill of the positive control's chain (it
    practises the weakest one by its evaluated success)."""
    chain = target_chain(target_skills)
    missing = [skill for skill in chain if skill not in ENV_SKILLS[eval_env_id][0]]
    if missing:
        raise ValueError(
            f"positive_control practises the weakest evaluated skill of {' -> '.join(chain)}, "
            f"but eval env {eval_env_id} does not evaluate {', '.join(missing)}; use an eval env "
            "that evaluates every skill of the chain, e.g. GameOn/MultiSkill-v0"
        )


def check_max_cost(max_cost: Any, curriculum: str, backend: str, model: str | None) -> None:
    """ValueError unless the VLM spending cap is None, or a USD amount > 0 for the vlm curriculum
    with a model whose price is listed (an unlisted one counts as $0, so no cap would hold)."""
    if max_cost is None:
        return
    check_curriculum_settings(curriculum, {"vlm_max_cost": max_cost})
    amount = isinstance(max_cost, int | float) and not isinstance(max_cost, bool)
    if not amount or not math.isfinite(max_cost) or max_cost <= 0:
        raise ValueError(f"vlm_max_cost must be a finite amount in USD > 0, got {max_cost!r}")
    if backend in FREE_BACKENDS or backend not in DEFAULT_MODELS:
        return
    model = model or DEFAULT_MODELS[backend]
    if model not in prices():
        raise ValueError(
            f"vlm_max_cost needs the price of {model!r}, which {PRICES_TOML} does not list: "
            "its calls would count as $0 and the cap would never stop them; add its USD per "
            "million prompt and completion tokens there, or run without a cap"
        )


def make_loop_curriculum(config: LoopConfig, run_dir: Path | None = None) -> Curriculum:
    """The run's curriculum over the practice env's tasks, seeded with the run's seed.

    It knows the run's budget (the episodes it will propose, which sizes hand's stage windows)
    and the target env's skills (which the controls practise or avoid). vlm: consulted once per
    iteration, its transcript in run_dir/transcript.jsonl (none if run_dir is None, as when a
    config is only validated).
    """
    vlm_options = {
        "backend": config.vlm_backend,
        "model": config.vlm_model,
        "base_url": config.vlm_base_url,
        "timeout": config.vlm_timeout,
        "retries": config.vlm_retries,
        "replay_path": config.vlm_replay,
        "transcript": run_dir,
        "interval": None,
        "proposal_size": config.vlm_proposal_size,
        "mastery": config.promote_threshold,
        "max_cost": config.vlm_max_cost,
    }
    return curriculum_for_env(
        config.practice_env_id,
        config.curriculum,
        config.seed,
        hand_path=config.hand_curriculum,
        vlm_options=vlm_options,
        budget=config.iterations * config.episodes_per_iteration,
        target_skills=config.target_skills,
        group="skill",
    )


# -- seeds ------------------------------------------------------------------------------------


def episode_seeds(seed: int, iteration: int, n: int) -> tuple[list[int], list[int]]:
    """Reset seeds and policy-noise seeds of an iteration's episodes, from (seed, iteration)."""
    rng = np.random.default_rng([seed, iteration, 0])
    resets = rng.integers(SEED_LOW, SEED_HIGH, size=n)
    noises = rng.integers(SEED_LOW, SEED_HIGH, size=n)
    return [int(s) for s in resets], [int(s) for s in noises]


def learner_seed(seed: int, iteration: int) -> int:
    """The offline learner's seed of an iteration, from (seed, iteration)."""
    return int(np.random.default_rng([seed, iteration, 1]).integers(0, 2**31))


def seed_tasks(seed: int, tasks: Sequence[str], count: int) -> list[str]:
    """The seed dataset's tasks: a skill drawn uniformly, then one of its instructions.

    The same for every curriculum of a seed (drawn from the practice env's task set, not the
    curriculum's). Drawing skills first keeps the seed data balanced: the practice env has 24
    place instructions but 6 stacks, and a uniform draw over instructions starves the targets.
    """
    by_skill = tasks_by_skill(tasks)
    skills = list(by_skill)
    rng = np.random.default_rng([seed, 0, 2])
    picks = []
    for _ in range(count):
        options = by_skill[skills[int(rng.integers(len(skills)))]]
        picks.append(options[int(rng.integers(len(options)))])
    return picks


# -- files ------------------------------------------------------------------------------------


def dataset_root(run_dir: Path, iteration: int) -> Path:
    """The Minari datasets root holding the dataset as iteration `iteration` committed it."""
    return run_dir / "datasets" / f"iter_{iteration}"


def policy_dir(run_dir: Path, iteration: int) -> Path:
    """Where the learner of iteration `iteration` writes its checkpoint and logs."""
    return run_dir / "policies" / f"iter_{iteration}"


def load_state(run_dir: Path, config: LoopConfig) -> CollectState | None:
    """The committed state of a run folder (None if new); ValueError if another config's, if
    the run has done more iterations than `config` asks for, or if the folder holds files but
    no run (see `check_run_folder`)."""
    path = run_dir / "state.json"
    if not path.is_file():
        check_run_folder(run_dir)
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
        raise ValueError(f"{path} is not a collect state ({STATE_FORMAT})")
    try:
        state = CollectState.model_validate(data)
    except ValidationError as error:
        raise ValueError(f"{path} is not a valid collect state: {error}") from None
    saved, wanted = state.config, asdict(config)
    if names_committed_stages_file(state, config):
        wanted["hand_curriculum"] = saved["hand_curriculum"]
    free = {*RESUMABLE_CHANGES, *unread_settings(config.curriculum)}
    changed = [k for k in wanted if k not in free and saved.get(k) != wanted[k]]
    if changed:
        values = "; ".join(f"{k} was {saved.get(k)!r}, now {wanted[k]!r}" for k in changed[:4])
        more = f"; and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise ValueError(
            f"{run_dir} holds a run with another config ({', '.join(changed)} differ: "
            f"{values}{more}); "
            f"resume with the same config (only {', '.join(RESUMABLE_CHANGES)} may change, and "
            f"the settings the {config.curriculum} curriculum does not read) or use another "
            "run dir"
        )
    if state.iteration > config.iterations:
        raise ValueError(
            f"{run_dir} holds a run that has done {plural(state.iteration, 'iteration')}; "
            f"resume or extend it with iterations {state.iteration} or more, not "
            f"{config.iterations}"
        )
    base = run_dir.resolve()
    for checkpoint in learned_checkpoints(state.library):
        if Path(checkpoint).is_absolute() and not Path(checkpoint).resolve().is_relative_to(base):
            raise ValueError(
                f"{path} names the learned checkpoint {checkpoint}, outside the run folder "
                f"{run_dir}: the folder was moved since it was committed by a version that kept "
                "absolute paths; move it back to resume it there"
            )
    return state


def stages_file(config: LoopConfig) -> str | None:
    """The hand curriculum's stages file as an absolute path (None if none is given): what a
    state keeps to know it again, however a resume names it and from whichever folder."""
    if config.hand_curriculum is None:
        return None
    return str(Path(config.hand_curriculum).resolve())


def names_committed_stages_file(state: CollectState, config: LoopConfig) -> bool:
    """Whether `config.hand_curriculum` names the stages file the state was committed with,
    spelt another way or from another folder (a state from before `hand_curriculum_file` was
    kept: its path as read from the current folder)."""
    saved = state.config.get("hand_curriculum")
    if saved is None or config.hand_curriculum is None:
        return False
    committed = Path(state.hand_curriculum_file or saved)
    try:
        return Path(config.hand_curriculum).samefile(committed)
    except OSError:  # one of them is gone
        return False


def unread_settings(curriculum: str) -> set[str]:
    """The config fields that only other curricula than `curriculum` read (e.g. vlm_backend and
    the other vlm_* fields for every curriculum but vlm): nothing of such a run depends on them,
    so a resumed run may change them. The vlm curriculum reads its backend, so a vlm run keeps it:
    its iterations so far came from that backend's answers."""
    read_by_some = {setting for name in CURRICULA for setting in curriculum_class(name).settings}
    return read_by_some - set(curriculum_class(curriculum).settings)


def check_run_folder(run_dir: Path) -> None:
    """ValueError if `run_dir` holds files but no collect run (no committed state, no
    STARTED_FILE): a run there would remove its datasets/ and policies/ entries and record.json,
    so only a new or empty folder (or the benchmark runner's files) is taken."""
    if not run_dir.is_dir() or (run_dir / STARTED_FILE).is_file():
        return
    foreign = sorted(entry.name for entry in run_dir.iterdir() if entry.name not in KEPT_ON_REDO)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ValueError(
            f"{run_dir} holds files but no collect run ({shown}); give a new or empty folder, so "
            "that nothing of yours is removed (a run killed before its first commit by a version "
            "that did not mark its folder: remove the folder and start again)"
        )


def learned_checkpoints(library: dict[str, Any]) -> list[str]:
    """The checkpoints of a library's learned skills (SkillLibrary.to_dict's form)."""
    return [
        skill["executor"]["checkpoint"]
        for skill in library["skills"]
        if skill["executor"]["kind"] == "learned"
    ]


def run_library(library: dict[str, Any], run_dir: Path) -> SkillLibrary:
    """The skill library a state commits, its learned checkpoints resolved against the run
    folder (a state keeps them relative to it, so a moved run folder resumes with its own)."""
    base = run_dir.resolve()
    return SkillLibrary.from_dict(_map_checkpoints(library, lambda path: str(base / path)))


def _map_checkpoints(library: dict[str, Any], change: Callable[[str], str]) -> dict[str, Any]:
    """A copy of a library's JSON with each learned skill's checkpoint passed through `change`."""
    copied = json.loads(json.dumps(library))
    for skill in copied["skills"]:
        executor = skill["executor"]
        if executor["kind"] == "learned":
            executor["checkpoint"] = change(executor["checkpoint"])
    return copied


def remove_uncommitted(run_dir: Path, state: CollectState | None) -> None:
    """Delete the dataset roots and policy folders (`iter_{k}`, the names the loop writes) that
    the committed state does not name; anything else there (a user's copy, notes) is left."""
    keep_dataset = None if state is None else run_dir / state.dataset.root
    last = -1 if state is None else state.iteration
    for root in sorted((run_dir / "datasets").glob("iter_*")):
        if ITERATION_FOLDER.fullmatch(root.name) and root != keep_dataset and root.is_dir():
            shutil.rmtree(root)
    for folder in sorted((run_dir / "policies").glob("iter_*")):
        found = ITERATION_FOLDER.fullmatch(folder.name)
        if found and int(found[1]) > last and folder.is_dir():
            shutil.rmtree(folder)


ITERATION_FOLDER = re.compile(r"iter_(\d+)(\.copying)?")
"""The name of an iteration's dataset root or policy folder (or a dataset root being copied)."""


def committed_checkpoints(run_dir: Path, state: CollectState) -> list[Path]:
    """The policy checkpoints a committed state relies on: its policy and the learned skills'."""
    paths = [run_dir / state.policy]
    paths += [run_dir / checkpoint for checkpoint in learned_checkpoints(state.library)]
    unique: dict[Path, Path] = {}
    for path in paths:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def file_hashes(run_dir: Path, state: CollectState) -> dict[str, str]:
    """The sha256 of every file a committed state relies on (dataset root and checkpoints),
    keyed by path relative to the run folder."""
    base = run_dir.resolve()
    files = [
        *folder_files(run_dir / state.dataset.root),
        *committed_checkpoints(run_dir, state),
    ]
    return {_relative_to(path, base): file_sha256(path) for path in files}


def _relative_to(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base).as_posix()
    except ValueError:
        return str(path.resolve())


def bad_files(run_dir: Path, state: CollectState) -> list[BadFile]:
    """The committed files that are missing or not what was committed (by their sha256), or, in
    a state without hashes, that do not load."""
    if state.files:
        return check_hashes(state.files, run_dir)
    bad = check_dataset(run_dir / state.dataset.root)
    for path in committed_checkpoints(run_dir, state):
        problem = check_checkpoint(path)
        if problem is not None:
            bad.append(problem)
    return bad


UNREADABLE_STATE = (json.JSONDecodeError, UnicodeDecodeError)
"""A state.json that raises these is a bad file: the run is re-done, not refused."""


def check_resumable(run_dir: Path, config: LoopConfig) -> CollectState | None:
    """What `load_checked_state` refuses (ValueError), without hashing the committed files: for a
    check before the run, which checks them itself. Returns the committed state (None if new or
    unreadable, which the run re-does)."""
    try:
        return load_state(run_dir, config)
    except UNREADABLE_STATE:
        return None


def load_checked_state(
    run_dir: Path, config: LoopConfig
) -> tuple[CollectState | None, list[BadFile]]:
    """The committed state (None if new) and its bad files; ValueError if another config's."""
    try:
        state = load_state(run_dir, config)
    except UNREADABLE_STATE as error:
        return None, [BadFile(run_dir / "state.json", f"not JSON ({error})")]
    if state is None:
        return None, []
    return state, bad_files(run_dir, state)


def redo_after_bad_files(run_dir: Path, bad: Sequence[BadFile]) -> dict[str, Any]:
    """Report bad files on stderr, move the run's files to bad_files/<time>/ and log it in
    bad_files/report.json, so the run starts again from iteration 0 in a clean folder."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    kept = run_dir / BAD_FILES_DIR / stamp
    kept.mkdir(parents=True)
    for entry in sorted(run_dir.iterdir()):
        if entry.name not in KEPT_ON_REDO:
            entry.rename(kept / entry.name)
    for item in bad:
        print(f"bad file: {item}", file=sys.stderr)
    print(
        f"the run in {run_dir} is re-done from iteration 0, its last good commit (only the latest "
        f"commit's dataset is kept): the same seeds give the same run; its previous files are in "
        f"{kept}",
        file=sys.stderr,
        flush=True,
    )
    report = {
        "found": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "files": [{"path": str(item.path), "problem": item.problem} for item in bad],
        "moved_to": str(kept.relative_to(run_dir)),
        "redone_from_iteration": 0,
    }
    log = run_dir / BAD_FILES_DIR / BAD_FILES_LOG
    earlier = bad_file_reports(run_dir)
    if earlier and UNREADABLE_LOG in earlier[0]:
        aside = log.with_name(f"{log.stem}.{stamp}.unreadable{log.suffix}")
        log.rename(aside)
        earlier = [{UNREADABLE_LOG: f"an unreadable log was moved to {aside.name}"}]
    atomic_write(log, json.dumps([*earlier, report], indent=1) + "\n")
    return report


def run_setup() -> dict[str, Any]:
    """What this process runs under and a record names (commit, package versions, machine with
    its BLAS and torch kernels): a resume under another gives other numbers from then on."""
    return {"git_commit": git_commit(), "versions": versions(), "platform": platform_info()}


def _started(run_dir: Path) -> dict[str, Any]:
    """STARTED_FILE's contents, empty where it does not read as a JSON object."""
    try:
        started = json.loads((run_dir / STARTED_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return started if isinstance(started, dict) else {}


def run_setups(run_dir: Path, started: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The distinct setups the run's starts and resumes ran under (STARTED_FILE, or `started`,
    its contents), first first; none for a run started before they were kept."""
    setups = (_started(run_dir) if started is None else started).get("setups", [])
    return setups if isinstance(setups, list) else []


def note_setup(run_dir: Path, setup: dict[str, Any]) -> None:
    """Keep a resume's setup beside the earlier ones, saying on stderr when it is another: the
    record names the last, and an audit compares a run of several setups by tolerance."""
    started = _started(run_dir)
    setups = run_setups(run_dir, started)
    if not setups or setup in setups:
        return
    first = setups[0]
    differ = [key for key in ("git_commit", "versions", "platform") if first.get(key) != setup[key]]
    print(
        f"resuming {run_dir} under another {', '.join(differ)} than it started with: what it "
        "does from here on may differ from an uninterrupted run's, its record names this setup "
        "and lists the others, and an audit compares it by tolerance, not bitwise (to keep it "
        "whole, resume under the first)",
        file=sys.stderr,
        flush=True,
    )
    atomic_write(
        run_dir / STARTED_FILE, json.dumps({**started, "setups": [*setups, setup]}, indent=2)
    )


def bad_file_reports(run_dir: Path) -> list[dict[str, Any]]:
    """What earlier starts of this run found bad (bad_files/report.json), oldest first; one
    that does not read as a list of reports (a hand edit, a disk fault) is named as such, not
    a reason to stop the run."""
    path = run_dir / BAD_FILES_DIR / BAD_FILES_LOG
    if not path.is_file():
        return []
    try:
        reports = json.loads(path.read_text())
    except (OSError, ValueError):
        reports = None
    if isinstance(reports, list) and all(isinstance(report, dict) for report in reports):
        return reports
    return [{UNREADABLE_LOG: f"{BAD_FILES_DIR}/{BAD_FILES_LOG} is not a list of reports"}]


def copy_dataset(run_dir: Path, source: Path, iteration: int) -> Path:
    """Copy the committed dataset root into iteration `iteration`'s root; return it."""
    target = dataset_root(run_dir, iteration)
    tmp = target.with_name(target.name + ".copying")
    shutil.copytree(source, tmp)
    tmp.rename(target)
    return target


# -- one iteration ----------------------------------------------------------------------------


def train_and_evaluate(
    config: LoopConfig, iteration: int, root: Path, run_dir: Path, previous: str | None
) -> dict:
    """Train the learner on the whole dataset in `root`, from the previous iteration's policy
    (`warm_start`) or from scratch; return its summary.

    BC learns from the successful skill segments only (self-collected failures would teach it
    to fail); IQL learns from every transition with the oracle's rewards. The learner's output,
    stderr too, goes to the policy folder's train.log: after Ctrl-C its line says a run does not
    resume, which holds for a learner run but not for this loop (the command line says to resume).
    """
    learner = importlib.import_module(f"gameon.baselines.{config.learner}")  # needs torch
    folder = policy_dir(run_dir, iteration)
    folder.mkdir(parents=True, exist_ok=True)
    args = learner.Args(
        dataset_id=DATASET_ID,
        datasets_path=str(root),
        env_id=config.eval_env,
        seed=learner_seed(config.seed, iteration),
        num_updates=config.num_updates,
        eval_episodes_per_skill=config.eval_episodes_per_skill,
        run_dir=str(folder),
        chunk_length=config.chunk_length,
        init_checkpoint=previous if config.warm_start else None,
        **({"success_only": True} if config.learner == "bc" else {}),
    )
    with (
        open(folder / "train.log", "w") as log,
        contextlib.redirect_stdout(log),
        contextlib.redirect_stderr(log),
    ):
        return learner.train(args)


def promote(
    library: SkillLibrary, rates: dict[str, float], checkpoint: str, config: LoopConfig
) -> None:
    """Choose each skill's executor for the next collection (macros and coded skills stay).

    learned, mixed and demo: the new policy runs every skill. expert (protocol v1): each evaluated
    skill gets the new policy if it passed promote_threshold, else its noisy scripted expert.
    """
    if config.collector != "expert":
        promote_all(library, checkpoint)
    else:
        promote_by_rate(library, rates, checkpoint, config.promote_threshold, config.seed_noise)


def vlm_propose(
    curriculum: Curriculum, embodiment: Embodiment, scene_seed: int, count: int
) -> tuple[list[str], dict[str, Any]]:
    """vlm: consult the model on the first episode's scene, sample tasks, plan each one."""
    from gameon.experimenter.vlm.collect import plan_tasks

    curriculum.consult(scene_seed=scene_seed)
    tasks = curriculum.propose_batch(count)
    report = {
        "source": curriculum.source,
        "proposal": list(curriculum.proposal),
        "rationale": curriculum.rationale,
        "plans": plan_tasks(curriculum, embodiment, tasks),
    }
    return tasks, report


def vlm_reflect(
    config: LoopConfig,
    iteration: int,
    curriculum: Curriculum,
    embodiment: Embodiment,
    curves: dict[str, list[float]],
    rates: dict[str, float],
    checkpoint: str,
) -> dict[str, Any]:
    """vlm: analyse the curves, promote converged skills, maybe add a verified macro skill and
    (`vlm_code_skills`) verified coded skills."""
    from gameon.experimenter.vlm.collect import add_verified_skill, analyse_and_promote, code_skills

    library = embodiment.library
    statuses = analyse_and_promote(
        curriculum, library, curves, rates, checkpoint, config.promote_threshold, config.seed_noise
    )
    report: dict[str, Any] = {"analysis": statuses, "new_skill": None}
    if config.vlm_code_skills:
        trials = trial_seeds(config, iteration, stream=5)
        tasks = task_set(config.practice_env_id)
        report["coding"] = code_skills(
            curriculum, embodiment, tasks, trials, config.promote_threshold
        )
    if config.vlm_add_skills:
        trials = trial_seeds(config, iteration, stream=3)
        report["new_skill"] = add_verified_skill(
            curriculum, embodiment, trials, config.promote_threshold
        )
    return report


def trial_seeds(config: LoopConfig, iteration: int, stream: int) -> list[int]:
    """Reset seeds of an iteration's verification trials, from (seed, iteration, stream)."""
    rng = np.random.default_rng([config.seed, iteration, stream])
    return [int(s) for s in rng.integers(SEED_LOW, SEED_HIGH, size=config.vlm_verify_trials)]


def demonstrate_failures(
    config: LoopConfig,
    iteration: int,
    embodiment: Embodiment,
    records: Sequence[EpisodeRecord],
    episodes: EpisodeBar,
) -> list[EpisodeRecord]:
    """demo collector: run each task the learner failed once more from the same start, every
    skill of its plan by the noisy scripted expert, so the data holds a whole demonstration of
    what the learner cannot do yet (a takeover only shows the end of a skill). The episodes bar
    counts them."""
    failed = [record for record in records if not record.attempt_success]
    rng = np.random.default_rng([config.seed, iteration, 4])
    noise_seeds = rng.integers(SEED_LOW, SEED_HIGH, size=len(failed))
    expert = ScriptedExecutor(config.seed_noise)
    episodes.demonstrations(len(failed))
    demonstrations = []
    for record, noise_seed in zip(failed, noise_seeds, strict=True):
        demonstrations.append(
            embodiment.execute(record.instruction, record.seed, int(noise_seed), executor=expert)
        )
        episodes.advance()
    return demonstrations


def mastered(config: LoopConfig, rates: dict[str, float]) -> bool:
    """Whether every target skill reached stop_threshold in this evaluation."""
    return all(rates.get(skill, 0.0) >= config.stop_threshold for skill in config.target_skills)


def run_iteration(
    config: LoopConfig,
    run_dir: Path,
    iteration: int,
    state: CollectState | None,
    curriculum: Curriculum,
    embodiment: Embodiment,
    episodes: EpisodeBar,
) -> CollectState:
    """Collect, record, retrain and evaluate one iteration; return the state to commit. The
    episodes bar counts the attempts and any demonstrations."""
    from gameon.experimenter.embodiment import ACTORS

    start = time.perf_counter()
    vlm = curriculum.experimenter and iteration > 0
    report: dict[str, Any] = {}
    count = config.seed_episodes if iteration == 0 else config.episodes_per_iteration
    seeds, noise_seeds = episode_seeds(config.seed, iteration, count)
    if iteration == 0:
        tasks = seed_tasks(config.seed, task_set(config.practice_env_id), count)
    elif vlm:
        tasks, report = vlm_propose(curriculum, embodiment, seeds[0], count)
    else:
        tasks = curriculum.propose_batch(config.episodes_per_iteration)
    episodes.start(count)
    records = embodiment.execute_many(tasks, seeds, noise_seeds, callback=episodes.advance)
    demonstrations = []
    if iteration > 0:
        attempts = [Outcome(r.instruction, r.attempt_success, r.episode_return) for r in records]
        curriculum.update_batch(attempts)
        if config.collector == "demo":
            demonstrations = demonstrate_failures(config, iteration, embodiment, records, episodes)
    episodes.collected()

    if state is None:
        root = dataset_root(run_dir, 0)
    else:
        root = copy_dataset(run_dir, run_dir / state.dataset.root, iteration)
    executed = [*records, *demonstrations]
    relabelled = [r.relabel() for r in executed if r.needs_relabel] if config.relabel else []
    embodiment.record([*executed, *relabelled], DATASET_ID, root, append=True)
    previous = None if state is None else str(run_dir / state.policy)
    summary = train_and_evaluate(config, iteration, root, run_dir, previous)
    evaluation = summary["eval"]
    curriculum.update_evaluation(
        [
            Outcome(e["instruction"], e["success"], e["episode_return"])
            for e in evaluation["episodes"]
        ]
    )
    rates = {skill: r["rate"] for skill, r in evaluation["per_skill"].items()}
    checkpoint = str(Path(summary["checkpoint"]).resolve())
    curves = {} if state is None else {k: list(v) for k, v in state.curves.items()}
    for skill, rate in rates.items():
        curves.setdefault(skill, []).append(rate)
    if vlm:
        report |= vlm_reflect(config, iteration, curriculum, embodiment, curves, rates, checkpoint)
    if not vlm or config.collector != "expert":
        promote(embodiment.library, rates, checkpoint, config)

    stored = len(executed) + len(relabelled)
    episodes = (0 if state is None else state.dataset.episodes) + stored
    history = [] if state is None else list(state.history)
    actor_steps = {actor: sum(r.actor_steps()[actor] for r in executed) for actor in ACTORS}
    history.append(
        {
            "iteration": iteration,
            "tasks": tasks,
            "practised": dict(Counter(parse(task).skill for task in tasks)),
            "seeds": seeds,
            "noise_seeds": noise_seeds,
            "task_success": [bool(r.success) for r in records],
            "attempt_success": [bool(r.attempt_success) for r in records],
            "plans": [r.skills for r in records],
            "actor_steps": actor_steps,
            "demonstrations": len(demonstrations),
            "relabelled_episodes": len(relabelled),
            "dataset_episodes": episodes,
            "learner_seed": learner_seed(config.seed, iteration),
            "eval": rates,
            "success_rate": evaluation["success_rate"],
            "env_steps": sum(r.steps for r in executed),
            "executors": {s.name: s.executor.kind for s in embodiment.library},
            "curriculum": curriculum_brief(curriculum),
            **({"vlm": report} if vlm else {}),
            "seconds": time.perf_counter() - start,
        }
    )
    done = mastered(config, rates)
    return CollectState(
        config=asdict(config),
        iteration=iteration,
        stopped="mastered" if config.auto_stop and done else None,
        curriculum=curriculum.state_dict(),
        library=portable_library(embodiment.library.to_dict(), run_dir),
        curves=curves,
        history=history,
        dataset=DatasetRef(id=DATASET_ID, root=str(root.relative_to(run_dir)), episodes=episodes),
        policy=str(Path(summary["checkpoint"]).resolve().relative_to(run_dir.resolve())),
        evaluation=evaluation,
        targets=None,
        curriculum_label=curriculum_label(curriculum),
        vlm=vlm_usage(curriculum),
        seed=config.seed,
        wall_seconds=iterations_seconds(history),  # a superseded final evaluation is not kept
        start_iterations=config.iterations if state is None else state.start_iterations,
        hand_curriculum_file=stages_file(config),
    )


def iterations_seconds(history: Sequence[dict[str, Any]]) -> float:
    """The seconds of a run's committed iterations, each counted once (see
    `CollectState.wall_seconds`: the final evaluations are added when they are made)."""
    return float(sum(h["seconds"] for h in history))


def evaluate_targets(
    config: LoopConfig, run_dir: Path, state: CollectState
) -> list[dict[str, Any]]:
    """The final policy on the target env's suite (and report_env_id's), `target_eval_episodes`
    per skill, twice: monolithic (the task's own goal) and composed (the run's skill library's
    plan, every step by the learned policy: no scripted executor acts)."""
    from gameon.evaluation import evaluate
    from gameon.experimenter.embodiment import evaluate_composed, learned_library
    from gameon.policy import load_policy

    checkpoint = run_dir / state.policy
    library = learned_library(run_library(state.library, run_dir), checkpoint)
    results = []
    for env_id in [config.env_id, *([config.report_env_id] if config.report_env_id else [])]:
        monolithic = evaluate(
            load_policy(checkpoint), env_id, episodes_per_skill=config.target_eval_episodes
        )
        composed = evaluate_composed(
            library, env_id, config.target_eval_episodes, config.practice_env_id
        )
        results.append({"mode": "monolithic", "evaluation": monolithic.to_dict()})
        results.append({"mode": "composed", "evaluation": composed.to_dict()})
    return results


def commit(run_dir: Path, state: CollectState, previous: CollectState | None) -> None:
    """Write the state (the commit point), then drop the dataset root it supersedes."""
    state.write(run_dir / "state.json")
    if previous is not None and previous.dataset.root != state.dataset.root:
        shutil.rmtree(run_dir / previous.dataset.root, ignore_errors=True)


# -- outputs ----------------------------------------------------------------------------------


def collected_counts(history: list[dict]) -> Collected:
    """Tasks the curriculum chose (iteration 0's uniform seed data excluded) per skill and block."""
    tasks = [parse(task) for h in history if h["iteration"] > 0 for task in h["tasks"]]
    skills = Counter(task.skill for task in tasks)
    objects = Counter(colour for task in tasks for colour in task.objects)
    return Collected(episodes=len(tasks), skills=dict(skills), objects=dict(objects))


def portable_library(library: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The library's JSON with learned checkpoints relative to the run folder, as the state and
    the record keep it (the leaderboard's --verify rebuilds the composed policy from it)."""
    base = run_dir.resolve()

    def relative(path: str) -> str:
        return str(Path(path).relative_to(base)) if Path(path).is_relative_to(base) else path

    return _map_checkpoints(library, relative)


def training_of(config: LoopConfig, state: CollectState, run_dir: Path) -> Training:
    """What the run's training read: the LoopConfig, the learner's Args of the final iteration,
    the practice env's kwargs, the iterations it was started with (its curriculum's budget)
    and, for vlm, the transcript to replay."""
    from gameon.experimenter.embodiment import MAX_EPISODE_STEPS

    summary = (run_dir / state.policy).parent / "summary.json"
    learner_args = json.loads(summary.read_text()).get("args") if summary.is_file() else None
    transcript = run_dir / TRANSCRIPT_FILE
    return Training(
        config=asdict(config),
        learner_args=learner_args,
        env_kwargs={"max_episode_steps": MAX_EPISODE_STEPS, "terminate_on_success": False},
        transcript=transcript.name if transcript.is_file() else None,
        start_iterations=state.start_iterations,
    )


def run_record(config: LoopConfig, state: CollectState, run_dir: Path) -> RunRecord:
    """The run record (gameon.records): final evaluation episodes, curve, data, cost, and the
    evidence (checkpoint, weights and dataset hashes), training config and machine."""
    budget_spent = state.iteration >= config.iterations
    stopped = state.stopped or ("budget" if budget_spent else "interrupted")
    history = state.history
    env_steps = sum(h.get("env_steps", 0) for h in history)
    bad_files, setups = bad_file_reports(run_dir), run_setups(run_dir)
    return build_record(
        run_dir=run_dir,
        run_id=run_dir.resolve().name,
        protocol="collect",
        curriculum=config.curriculum,
        curriculum_label=state.curriculum_label,
        learner=config.learner,
        env_id=config.env_id,
        target_skills=config.target_skills,
        seed=config.seed,
        budget={
            "iterations": config.iterations,
            "episodes_per_iteration": config.episodes_per_iteration,
            "seed_episodes": config.seed_episodes,
            "num_updates": config.num_updates,
        },
        curve_unit="iterations",
        curve=[
            CurvePoint(step=h["iteration"], success_rate=h["success_rate"], per_skill=h["eval"])
            for h in history
        ],
        evaluation=Evaluation(
            env_id=config.eval_env,
            suite_seed=SUITE_SEED,
            episodes_per_skill=config.eval_episodes_per_skill,
            episodes=state.evaluation["episodes"],
        ),
        collected=collected_counts(history),
        protocol_version=1 if config.collector == "expert" else 2,
        target_evaluations=[
            TargetEvaluation(
                mode=target["mode"],
                evaluation=Evaluation(
                    env_id=target["evaluation"]["env_id"],
                    suite_seed=SUITE_SEED,
                    episodes_per_skill=config.target_eval_episodes,
                    episodes=target["evaluation"]["episodes"],
                ),
            )
            for target in state.targets or []
        ],
        vlm=VLMUsage(**state.vlm),
        wall_seconds=state.wall_seconds,
        env_steps=env_steps,
        steps_per_second=env_steps / state.wall_seconds if state.wall_seconds else 0.0,
        checkpoint=run_dir / state.policy,
        dataset=run_dir / state.dataset.root,
        training=training_of(config, state, run_dir),
        extra={
            **({"bad_files": bad_files} if bad_files else {}),
            **({"setups": setups} if len(setups) > 1 else {}),
            "practice_env_id": config.practice_env_id,
            "config": asdict(config),
            "stopped": stopped,
            "iterations_done": state.iteration,
            "target_mastered": mastered(config, history[-1]["eval"]),
            "dataset": state.dataset.model_dump(),
            "library": portable_library(state.library, run_dir),
            "iterations": [
                {
                    "iteration": h["iteration"],
                    "practised": h["practised"],
                    "episodes": h["dataset_episodes"],
                    "task_success_rate": float(np.mean(h["task_success"])),
                    "attempt_success_rate": float(np.mean(h["attempt_success"])),
                    "actor_steps": h["actor_steps"],
                    "relabelled_episodes": h["relabelled_episodes"],
                    "demonstrations": h.get("demonstrations", 0),
                    "executors": h["executors"],
                    "curriculum": h["curriculum"],
                }
                for h in history
            ],
        },
    )


def plot_curves(state: CollectState, path: Path) -> None:
    """Plot per-skill evaluated success per iteration to a PNG, atomically."""
    title = f"collect: {state.curriculum_label} + {state.config['learner']}"
    atomic_write(path, skill_curves_png(state.curves, title=title))


def write_outputs(config: LoopConfig, run_dir: Path, state: CollectState) -> RunRecord:
    """Write record.json and curves.png of a finished run; return the record.

    Only a finished run has a record (iterations plot curves.png alone), so a report or the
    leaderboard never counts half a run.
    """
    record = run_record(config, state, run_dir)
    write_record(run_dir / RECORD_FILE, record)
    plot_curves(state, run_dir / "curves.png")
    return record


# -- the loop ---------------------------------------------------------------------------------


def finished(config: LoopConfig, state: CollectState | None) -> bool:
    """Whether the committed state ends the run: its budget is spent, or it stopped as mastered
    and `auto_stop` is still on (resumed with auto_stop off, a mastered run goes on)."""
    if state is None:
        return False
    stopped = state.stopped == "mastered" and config.auto_stop
    return stopped or state.iteration >= config.iterations


def outcomes_to_report(config: LoopConfig, state: CollectState | None) -> tuple[int, int]:
    """The practice attempts and evaluation episodes the run has yet to report to its curriculum
    (a new run's seed data is not reported, its evaluation is)."""
    per_evaluation = config.eval_episodes_per_skill * len(ENV_SKILLS[config.eval_env][0])
    left = config.iterations if state is None else max(0, config.iterations - state.iteration)
    evaluations = left + 1 if state is None else left
    return left * config.episodes_per_iteration, evaluations * per_evaluation


def budget_line(
    config: LoopConfig, state: CollectState | None, curriculum: Curriculum
) -> str | None:
    """A warning, said as the run starts, naming a curriculum setting that can never take effect
    within the outcomes the run has yet to report (hand: a stage window that cannot fill), and
    what to change; None if there is none."""
    if finished(config, state):
        return None
    attempts, evaluations = outcomes_to_report(config, state)
    problem = curriculum.budget_warning(attempts + evaluations)
    if problem is None:
        return None
    return (
        f"warning: {problem}, or more iterations or episodes_per_iteration (the run has "
        f"{plural(attempts, 'practice episode')} and {plural(evaluations, 'evaluation episode')} "
        f"left to report: iterations {config.iterations}, episodes_per_iteration "
        f"{config.episodes_per_iteration})"
    )


def iteration_line(config: LoopConfig, state: CollectState) -> str:
    """One line on the iteration just committed: its evaluated success per skill, its time, and
    what is left at its pace (a run in a log shows no bars, so this is what says it moves)."""
    last = state.history[-1]
    rates = ", ".join(f"{skill} {rate:.2f}" for skill, rate in last["eval"].items())
    line = (
        f"iteration {state.iteration}/{config.iterations} committed in {last['seconds']:.0f} s: "
        f"evaluated success {rates}"
    )
    if state.stopped == "mastered":
        return f"{line}; every target skill mastered, so the run stops here (auto_stop)"
    left = config.iterations - state.iteration
    if left > 0:
        seconds = left * last["seconds"]
        pace = f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
        line += f"; {left} to go, about {pace} at this pace"
    return line


def mastered_note(config: LoopConfig, run_dir: Path, state: CollectState | None) -> str | None:
    """What to tell a user who asks a run that auto_stop ended as mastered for more iterations
    than it was started with (None otherwise): auto_stop keeps it stopped, so no iteration is
    added, and resuming with auto_stop off runs them."""
    if state is None or state.stopped != "mastered" or not config.auto_stop:
        return None
    if config.iterations <= state.config["iterations"] or state.iteration >= config.iterations:
        return None
    return (
        f"note: the run in {run_dir} stopped at iteration {state.iteration}, when every target "
        f"skill reached stop_threshold {config.stop_threshold}, and auto_stop keeps it stopped: "
        f"iterations {config.iterations} adds no iteration. To run more, resume with auto_stop "
        "off (gameon experiment ... --no-auto-stop, or LoopConfig(auto_stop=False)); the run "
        "goes on from its last commit"
    )


@dataclass
class EpisodeBar:
    """The episodes bar of one iteration: its attempts, then the demonstrations of the tasks the
    learner failed (demo collector: known only once the attempts are in, so the total grows),
    then what follows (`then`: training and evaluation, minutes without a bar of their own)."""

    bar: Any
    """the rich Progress"""
    task: Any
    """its episodes task"""
    iteration: int
    then: str
    total: int = 0

    def start(self, attempts: int) -> None:
        """Show the iteration's `attempts` episodes, none done yet."""
        self.total = attempts
        description = f"iteration {self.iteration}: episodes"
        self.bar.reset(self.task, total=attempts, description=description)

    def advance(self, _: EpisodeRecord | None = None) -> None:
        """One episode is in (an embodiment callback)."""
        self.bar.advance(self.task)

    def demonstrations(self, count: int) -> None:
        """`count` demonstrations follow the attempts: count them in the bar and say so."""
        if count == 0:
            return
        self.total += count
        description = (
            f"iteration {self.iteration}: demonstrations of {plural(count, 'failed task')}"
        )
        self.bar.update(self.task, total=self.total, description=description)

    def collected(self) -> None:
        """Every episode of the iteration is in: say what follows."""
        self.bar.update(self.task, description=self.then)


@contextlib.contextmanager
def progress_bar(enabled: bool) -> Iterator[Any]:
    """A rich progress display (on stderr) with an iterations bar and an episodes bar."""
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), disable=not enabled) as bar:
        yield bar


def run_experiment(config: LoopConfig, run_dir: Path, progress: bool = True) -> RunRecord:
    """Run (or resume, or extend by more `iterations`) the collect loop in `run_dir`; return the
    run record. Nothing in the folder is removed before its committed state has loaded, and a
    folder another run is working in is refused (ValueError) before anything is read."""
    config.validate()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "state.json").is_file():
        check_run_folder(run_dir)  # before the lock file is made in a folder that is not a run's
    with claim_run_folder(run_dir):
        return _run_in_folder(config, run_dir, progress)


class RunFolderInUse(ValueError):
    """The run folder is held by another process's run (`claim_run_folder`)."""


def claim_run_folder(run_dir: Path) -> contextlib.ExitStack:
    """Hold the run folder's lock (RUN_LOCK_FILE) for as long as the returned stack is open;
    RunFolderInUse at once if another process holds it: a second run resuming beside the first
    removed the first's uncommitted dataset, its record with it, and left a state naming a
    dataset that was gone. The lock dies with its process, so a killed run leaves none."""
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(file_lock(run_dir / RUN_LOCK_FILE, timeout=0))
    except TimeoutError:
        raise RunFolderInUse(
            f"{run_dir} is in use by another run (a `gameon experiment` or a benchmark worker "
            "in another process); wait for it to end, or give another --run-dir"
        ) from None
    return stack


def _run_in_folder(config: LoopConfig, run_dir: Path, progress: bool) -> RunRecord:
    """`run_experiment`'s work, with the folder claimed."""
    from gameon.experimenter.embodiment import Embodiment  # needs minari
    from gameon.experimenter.vlm.collect import PlannedEmbodiment

    state, bad = load_checked_state(run_dir, config)
    if bad:
        redo_after_bad_files(run_dir, bad)
        state = None
    note = mastered_note(config, run_dir, state)
    if note is not None:  # before the progress bars, which would draw over it
        print(note, file=sys.stderr, flush=True)
    setup = run_setup()
    if state is None:
        started = {"config": asdict(config), "setups": [setup]}
        atomic_write(run_dir / STARTED_FILE, json.dumps(started, indent=2))
    else:
        note_setup(run_dir, setup)
    curriculum = make_loop_curriculum(config, run_dir)
    if state is None:
        library = default_library(noise=config.seed_noise)
    else:
        curriculum.load_state_dict(state.curriculum)
        library = run_library(state.library, run_dir)
    curriculum.use_library(library)
    warning = budget_line(config, state, curriculum)
    if warning is not None:  # before the progress bars, which would draw over it
        print(warning, file=sys.stderr, flush=True)
    embodiment_class = PlannedEmbodiment if curriculum.experimenter else Embodiment

    takeover = ScriptedExecutor(config.seed_noise) if config.collector == "mixed" else None
    with (
        embodiment_class(
            config.practice_env_id,
            library,
            takeover=takeover,
            stop_on_failure=config.collector == "demo",
        ) as embodiment,
        progress_bar(progress) as bar,
        contextlib.closing(curriculum),
    ):
        remove_uncommitted(run_dir, state)
        committed_calls = 0 if state is None else state.transcript_entries
        if committed_calls is not None:
            mark_abandoned(run_dir, committed_calls)
        if state is not None and not finished(config, state) and (run_dir / RECORD_FILE).is_file():
            # A record of fewer iterations than now asked for: kept aside, where no report or
            # leaderboard counts it, while the extended run makes its own.
            earlier = run_dir / f"record_after_iteration_{state.iteration}.json"
            (run_dir / RECORD_FILE).replace(earlier)
        done = 0 if state is None else state.iteration + 1
        iterations = bar.add_task("iterations", total=config.iterations + 1, completed=done)
        episodes = bar.add_task("episodes", total=config.seed_episodes)
        while not finished(config, state):
            iteration = 0 if state is None else state.iteration + 1
            then = (
                f"iteration {iteration}: training {config.learner} "
                f"({plural(config.num_updates, 'update')}), then evaluating"
            )
            new = run_iteration(
                config,
                run_dir,
                iteration,
                state,
                curriculum,
                embodiment,
                EpisodeBar(bar, episodes, iteration, then),
            )
            new.files = file_hashes(run_dir, new)
            new.transcript_entries = len(read_entries(run_dir / TRANSCRIPT_FILE))
            commit(run_dir, new, state)
            state = new
            plot_curves(state, run_dir / "curves.png")
            bar.advance(iterations)
            if progress:  # above the bars on a terminal; in a log, the only sign of progress
                line = iteration_line(config, state)
                bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
        bar.update(iterations, total=state.iteration + 1, completed=state.iteration + 1)
        bar.update(episodes, visible=False)  # the run is done: an early stop's bar would hang
    if state.targets is None:
        if progress:
            envs = [config.env_id, *([config.report_env_id] if config.report_env_id else [])]
            print(
                f"final evaluations on {', '.join(envs)}: "
                f"{plural(config.target_eval_episodes, 'episode')} per target skill, monolithic "
                "and composed",
                file=sys.stderr,
                flush=True,
            )
        start = time.perf_counter()
        targets = evaluate_targets(config, run_dir, state)
        seconds = time.perf_counter() - start
        state = state.model_copy(
            update={"targets": targets, "wall_seconds": state.wall_seconds + seconds}
        )
        commit(run_dir, state, None)
    return write_outputs(config, run_dir, state)
