"""The run record: one validated JSON document per run of the harness.

A record says what ran (protocol, curriculum and its label, learner, env id and version, seed,
budget, package versions, commit), how it was judged (every episode of the final evaluation on
the shared suite, so aggregates can be recomputed rather than trusted), how it learned (a curve of
evaluated success), what it cost (wall time, env steps, VLM calls and tokens) and, for the
collect protocol, what it practised (counts of skills and objects in the collected data).
Records made since trust at scale also carry evidence (the sha256 of the checkpoint file, of its
weights and, for the collect protocol, of the final dataset folder), what the training read
(`training`: the learner Args or LoopConfig, env kwargs, the VLM transcript) and the machine
(`platform`); all optional, so older records still load.

Two invariants let a reader check a record against itself (the leaderboard rejects a record that
breaks them as tampered): the last curve point is the final evaluation (its success rate and
per-skill rates are those of `evaluation.episodes`), and `collected.episodes` is the sum of the
per-skill counts.

Records are written atomically (`write_record`) and read back validated (`load_record`), so a
reader never sees half a record and a malformed one is refused with the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gameon.atomic import atomic_write
from gameon.envs import ENV_SKILLS
from gameon.envs.language import COLOURS, SKILLS, parse
from gameon.integrity import (
    INPUT_FILE_FIELDS,
    checkpoint_evidence,
    folder_sha256,
    git_commit,
    input_file_digests,
    platform_info,
    versions,
)
from gameon.text import plural

RECORD_FORMAT = "gameon-run-record-v1"
PROTOCOLS = ("online", "collect")
RECORD_FILE = "record.json"
"""Name of the run record inside a run's folder."""
TARGET_MODES = ("composed", "monolithic")
RANKED_MODE = "composed"
"""The target evaluation that ranks collect v2 runs; the other is shown beside it."""


Skill = Literal[SKILLS]
Colour = Literal[COLOURS]
Rate = Annotated[float, Field(ge=0, le=1)]
Count = Annotated[int, Field(ge=0)]


class StrictModel(BaseModel):
    """A pydantic model that refuses unknown keys (a misspelt field is an error, not ignored)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class EpisodeOutcome(StrictModel):
    """One evaluation episode: an (instruction, seed) pair of the suite and the oracle's verdict."""

    instruction: str
    skill: str
    seed: int
    success: bool
    episode_return: float
    length: int = Field(ge=0)

    @model_validator(mode="after")
    def _skill_matches(self) -> EpisodeOutcome:
        try:
            parsed = parse(self.instruction)
        except ValueError as error:
            raise ValueError(f"episode instruction does not parse: {error}") from None
        if parsed.skill != self.skill:
            raise ValueError(f"episode {self.instruction!r} is a {parsed.skill}, not {self.skill}")
        return self


class Evaluation(StrictModel):
    """The final evaluation: every episode of the shared suite of `env_id`."""

    env_id: str
    suite_seed: int
    episodes_per_skill: int = Field(ge=1)
    episodes: list[EpisodeOutcome] = Field(min_length=1)

    def success_rate(self, skills: tuple[str, ...] | None = None) -> float:
        """Fraction of successful episodes, over all skills or only the given ones."""
        chosen = [e for e in self.episodes if skills is None or e.skill in skills]
        return sum(e.success for e in chosen) / len(chosen) if chosen else 0.0

    def per_skill(self) -> dict[str, float]:
        """Success rate per skill, in the suite's order."""
        skills = dict.fromkeys(e.skill for e in self.episodes)
        return {skill: self.success_rate((skill,)) for skill in skills}


class CurvePoint(StrictModel):
    """One point of a learning curve: the step (env steps or iteration) and evaluated success."""

    step: int = Field(ge=0)
    success_rate: float = Field(ge=0, le=1)
    per_skill: dict[Skill, Rate]


class VLMUsage(StrictModel):
    """What a run asked of a VLM backend (all zero for curricula without one)."""

    backend: str | None = None
    model: str | None = None
    calls: int = Field(0, ge=0)
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    cost_usd: float = Field(0.0, ge=0)
    fallbacks: int = Field(0, ge=0)
    capped_calls: int = Field(0, ge=0)
    """module calls that fell back unsent because the run's spending cap was reached (also
    counted in fallbacks; 0 in records made before the cap existed)"""
    used_answers: int | None = Field(None, ge=0)
    """module calls the model answered validly, answers cached from an identical earlier request
    included, so it may exceed `calls` (steps matched by parse without a request are not; 0 for
    a model whose every answer was invalid or missing, so every choice was the fallback's; None
    in records made before it was counted)"""


class TargetEvaluation(StrictModel):
    """A final evaluation on a target env's suite, of the monolithic or the composed policy.

    monolithic: the policy conditioned on the task's own goal (e.g. the tower instruction);
    composed: the task run as the skill library decomposes it (a tower as its stacks), every
    step by the learned policy, no scripted executor anywhere.
    """

    mode: Literal["monolithic", "composed"]
    evaluation: Evaluation


class Collected(StrictModel):
    """What the collect protocol practised: episodes per skill and mentions per block colour."""

    episodes: int = Field(ge=0)
    skills: dict[Skill, Count]
    objects: dict[Colour, Count]


SHA256 = r"^[0-9a-f]{64}$"


class Training(StrictModel):
    """Everything a re-run of the training reads, so an audit can rebuild the run from it."""

    config: dict[str, Any]
    """online: the learner's Args; collect: the LoopConfig (curriculum, its settings and the VLM
    backend included), as JSON"""
    learner_args: dict[str, Any] | None = None
    """collect: the offline learner's Args of the final iteration, its defaults included"""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """gym.make keyword arguments of the env trained in (online) or practised in (collect)"""
    transcript: str | None = None
    """vlm curriculum: the model's transcript.jsonl, relative to the run folder (an audit replays
    it)"""
    input_files: dict[str, str | None] = Field(default_factory=dict)
    """the sha256 of each file the config names by path (stages, coded skills, a transcript), by
    that path as given (relative ones from the run's working folder); an audit reads the same"""
    start_iterations: int | None = Field(default=None, ge=0)
    """collect: the iterations the run was started with, which its curriculum's budget was sized
    from (hand's `window_share` windows); fewer than config's `iterations` where it was extended
    since, keeping that budget, so an audit re-runs it the same way: started with these, then
    extended. None: online, or a record made before it was kept"""


class RunRecord(StrictModel):
    """One run of the harness, validated; see the module docstring."""

    format: Literal["gameon-run-record-v1"] = RECORD_FORMAT
    run_id: str = Field(min_length=1)
    protocol: Literal["online", "collect"]
    curriculum: str
    """curriculum name, one of `experimenter.curriculum.CURRICULA`"""
    curriculum_label: str
    """how results are labelled, e.g. "lp" or "vlm[rules]" (never a VLM's name for a stand-in)"""
    learner: str
    env_id: str
    """the target env: online, the env trained on; collect, the env whose tasks are the goal"""
    env_version: int = Field(ge=0)
    target_skills: list[str] = Field(min_length=1)
    seed: int
    budget: dict[str, int]
    """the run's budget, e.g. {"total_timesteps": 300000} or {"iterations": 5, ...}"""
    curve_unit: Literal["env_steps", "iterations"]
    curve: list[CurvePoint] = Field(min_length=1)
    evaluation: Evaluation
    collected: Collected | None = None
    protocol_version: int = Field(1, ge=1, le=2)
    """collect protocol version: 1, scripted experts collect; 2, the learner collects"""
    target_evaluations: list[TargetEvaluation] = Field(default_factory=list)
    """collect v2: the final policy on the target env's suite (and a report env's), monolithic
    and composed, with more episodes per skill than `evaluation`"""
    vlm: VLMUsage = VLMUsage()
    wall_seconds: float = Field(ge=0)
    env_steps: int = Field(ge=0)
    steps_per_second: float = Field(ge=0)
    """online: the learner's training steps per second of training (evaluations left out);
    collect: env steps per second of wall time. Reports use env_steps / wall_seconds for both."""
    versions: dict[str, str | None]
    git_commit: str | None
    created: str
    """ISO 8601 UTC time the record was written"""
    checkpoint: str | None = None
    """the final policy, relative to the run folder"""
    checkpoint_sha256: str | None = Field(None, pattern=SHA256)
    """sha256 of the checkpoint file's bytes (None in records made before it was kept)"""
    weights_sha256: str | None = Field(None, pattern=SHA256)
    """sha256 of the checkpoint's actor tensors and normaliser (gameon.integrity), which two
    runs of one seed share whatever folders they ran in"""
    dataset_sha256: str | None = Field(None, pattern=SHA256)
    """collect: sha256 over the final dataset folder's files in a stable order"""
    training: Training | None = None
    """what the training read (None in records made before it was kept)"""
    platform: dict[str, str] | None = None
    """the machine: system, machine, python, CPU model and, in records since they were kept, the
    kernels NumPy's BLAS and torch used (gameon.integrity.platform_info)"""
    extra: dict[str, Any] = Field(default_factory=dict)
    """protocol-specific details that no aggregate reads (e.g. collect: why it stopped)"""

    @model_validator(mode="after")
    def _consistent(self) -> RunRecord:
        if self.env_id not in ENV_SKILLS:
            raise ValueError(f"unknown env id {self.env_id!r}; accepted: {', '.join(ENV_SKILLS)}")
        if self.evaluation.env_id not in ENV_SKILLS:
            raise ValueError(f"unknown evaluation env id {self.evaluation.env_id!r}")
        if self.env_version != env_version(self.env_id):
            raise ValueError(f"env_version {self.env_version} does not match {self.env_id}")
        unknown = [s for s in self.target_skills if s not in SKILLS]
        if unknown:
            raise ValueError(f"unknown target skills {unknown}; accepted: {', '.join(SKILLS)}")
        steps = [point.step for point in self.curve]
        if steps != sorted(steps):
            raise ValueError(f"the curve's steps must not decrease, got {steps}")
        evaluated = {e.skill for e in self.evaluation.episodes}
        missing = [s for s in self.target_skills if s not in evaluated]
        if missing:
            raise ValueError(f"the evaluation has no episode of target skills {missing}")
        keys = [(t.mode, t.evaluation.env_id) for t in self.target_evaluations]
        if len(set(keys)) != len(keys):
            raise ValueError(f"target_evaluations repeat a (mode, env): {keys}")
        for _, env_id in keys:
            if env_id not in ENV_SKILLS:
                raise ValueError(f"unknown target evaluation env id {env_id!r}")
        if self.protocol_version == 2:
            absent = [m for m in TARGET_MODES if (m, self.env_id) not in keys]
            if absent:
                raise ValueError(
                    f"a protocol v2 record needs {absent} evaluations on {self.env_id}"
                )
        return self

    @property
    def target_success(self) -> float:
        """The headline number: the ranked target evaluation's success (collect v2: composed,
        on the target env's suite), else success over `evaluation`'s target-skill episodes."""
        wins, episodes = self.target_episodes
        return wins / episodes if episodes else 0.0

    @property
    def target_episodes(self) -> tuple[int, int]:
        """The successful and all episodes behind `target_success`."""
        evaluation = self.target_evaluation(RANKED_MODE) or self.evaluation
        chosen = [e for e in evaluation.episodes if e.skill in self.target_skills]
        return sum(e.success for e in chosen), len(chosen)

    def target_evaluation(self, mode: str, env_id: str | None = None) -> Evaluation | None:
        """The final evaluation of one mode on `env_id`'s suite (default: the target env)."""
        env_id = env_id or self.env_id
        for target in self.target_evaluations:
            if target.mode == mode and target.evaluation.env_id == env_id:
                return target.evaluation
        return None


def env_version(env_id: str) -> int:
    """The version number of a registered id, e.g. 0 for "GameOn/Tower-v0"."""
    match = re.fullmatch(r".+-v(\d+)", env_id)
    if match is None:
        raise ValueError(f"env id {env_id!r} has no version suffix -vN")
    return int(match.group(1))


def build_record(
    *,
    run_dir: Path,
    run_id: str,
    protocol: Literal["online", "collect"],
    curriculum: str,
    curriculum_label: str,
    learner: str,
    env_id: str,
    target_skills: Sequence[str],
    seed: int,
    budget: dict[str, int],
    curve_unit: Literal["env_steps", "iterations"],
    curve: list[CurvePoint],
    evaluation: Evaluation,
    vlm: VLMUsage,
    wall_seconds: float,
    env_steps: int,
    steps_per_second: float,
    checkpoint: Path,
    training: Training,
    extra: dict[str, Any],
    collected: Collected | None = None,
    protocol_version: int = 1,
    target_evaluations: Sequence[TargetEvaluation] = (),
    dataset: Path | None = None,
) -> RunRecord:
    """The record of a finished run, for both protocols: the caller says what ran and how it was
    judged; this adds what every record carries alike (the env's version, package versions,
    commit, time, machine, the checkpoint's path within the run folder and the hashes of the
    checkpoint, its weights and, for collect, the dataset folder)."""
    return RunRecord(
        run_id=run_id,
        protocol=protocol,
        curriculum=curriculum,
        curriculum_label=curriculum_label,
        learner=learner,
        env_id=env_id,
        env_version=env_version(env_id),
        target_skills=list(target_skills),
        seed=seed,
        budget=budget,
        curve_unit=curve_unit,
        curve=curve,
        evaluation=evaluation,
        collected=collected,
        protocol_version=protocol_version,
        target_evaluations=list(target_evaluations),
        vlm=vlm,
        wall_seconds=wall_seconds,
        env_steps=env_steps,
        steps_per_second=steps_per_second,
        versions=versions(),
        git_commit=git_commit(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        checkpoint=_relative(checkpoint, run_dir),
        **checkpoint_evidence(checkpoint),
        dataset_sha256=None if dataset is None else folder_sha256(dataset),
        training=training.model_copy(
            update={
                "input_files": input_file_digests(
                    [training.config.get(name) for name in INPUT_FILE_FIELDS]
                )
            }
        ),
        platform=platform_info(),
        extra=extra,
    )


def _relative(path: Path, run_dir: Path) -> str:
    """`path` relative to the run folder where it lies inside it, else as given."""
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)


def write_record(path: str | Path, record: RunRecord) -> Path:
    """Write a record atomically and durably (a synced temporary file, then a rename)."""
    return atomic_write(path, record.model_dump_json(indent=1) + "\n")


def validation_problems(error: ValidationError, limit: int = 5, inputs: bool = False) -> str:
    """What a failed validation found, as "where: what" for the first `limit` problems and a
    count of the rest (where: a dotted path into the JSON, <root> for the whole); with `inputs`,
    each says the value it found."""
    problems = error.errors(include_url=False)
    listed = "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or '<root>'}: {problem['msg']}"
        + (f", got {repr(problem['input'])[:60]}" if inputs else "")
        for problem in problems[:limit]
    )
    more = len(problems) - limit
    return listed + (f"; and {plural(more, 'more problem')}" if more > 0 else "")


def parse_record(data: str | bytes | dict, source: str = "record") -> RunRecord:
    """Validate a record from JSON text or a parsed object; ValueError says what is wrong."""
    try:
        if isinstance(data, dict):
            return RunRecord.model_validate(data)
        return RunRecord.model_validate_json(data)
    except ValidationError as error:
        message = f"{source} is not a valid run record ({RECORD_FORMAT}): "
        raise ValueError(message + validation_problems(error)) from None


def load_record(path: str | Path) -> RunRecord:
    """Read and validate a record file (or the record.json of a run folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORD_FILE
    if not path.is_file():
        raise ValueError(f"no run record at {path}")
    return record_from_bytes(path.read_bytes(), path)


def record_from_bytes(data: bytes, source: str | Path) -> RunRecord:
    """Validate a record file's bytes, read already; ValueError says if they are not JSON (UTF-8)
    or not a record."""
    try:
        json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{source} is not JSON: {error}") from None
    return parse_record(data, str(source))
