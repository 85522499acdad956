"""The leaderboard: submissions of run records are validated, their aggregates recomputed from
the per-episode outcomes, and only then appended to <board>/leaderboard.json, with copies of the
records under <board>/leaderboard/<entry id>/ and a regenerated <board>/LEADERBOARD.md.

A submission is the run records (record.json files or run folders) of one group: the same
protocol, curriculum label, learner and env. It is rejected, with every reason naming the run and
the check, unless:

- missing: each path is a record file or a run folder holding a record.json;
- schema: each record validates (gameon.records.load_record), and strictly: a value of the
  wrong JSON type (a seed of "0", a budget of 5.0), as a hand edit leaves it, is not converted;
- env: its env id and evaluation env id are registered here and its env_version matches;
- versions: it names the gameon-rl version it ran and a git commit;
- suite: its evaluation episodes are exactly the shared suite, the (instruction, seed) pairs of
  evaluation_suite(env, episodes_per_skill, SUITE_SEED), in order;
- suite (of the group): every run has the same evaluations, final and target, each with the
  same env, mode and episodes per skill;
- seeds: the runs have distinct seeds, at least `min_seeds` of them;
- tampered: its claimed numbers agree with its own episodes: the last curve point is the final
  evaluation, so its success_rate and per_skill must equal the episodes' (to 1e-9), and the
  collected episodes must equal the sum of the collected skill counts; and it agrees with itself
  (`contradictions`, the check the audit makes too): its target skills are its env's, its seed,
  learner, curriculum, env and budget are those of its own training config, a collect run with
  auto_stop on ends at the first iteration that mastered its targets, and its env steps and
  curve fit its budget;
- duplicate: no run is already on the board (same content hash of identity and episodes), nor
  twice in the submission; and no two runs (of the submission, or one of it and one on the board)
  share a checkpoint file (sha256, from the record or computed from the checkpoint it points to),
  trained weights (weights_sha256), or, where their seeds differ, every evaluation episode's
  outcome and return. The last catches a run copied under other seed labels, since the suite does
  not depend on the training seed; it applies only where agreement by chance is improbable
  (below CHANCE, with each episode matching with probability p^2 + (1 - p)^2 at its skill's
  success rate p), as runs that fail or succeed at everything agree whatever their seed;
- paths: the files a record names (its checkpoint, its VLM transcript) resolve, symlinks
  followed, inside its run folder, so a submission reads and copies nothing else;
- evidence: a record's checkpoint_sha256 matches the checkpoint file it points to, where it
  exists;
- verify (only with verify=True): the record's checkpoint, reloaded and run on the suite again,
  reproduces the claimed success within `tolerance` (absolute, default 0.1) overall, on the
  target skills and per skill. Evaluation is deterministic, so an honest claim reproduces exactly;
  the tolerance only absorbs platform differences in floating point.

The board is never lost: it is read and rewritten under a lock file, every file is written
atomically, and a leaderboard.json that does not parse as a board is refused (BoardError), never
overwritten. Entry ids are "NNNN-hash": NNNN from a counter kept in leaderboard.json
(`next_number`; on a board without it, one more than the largest number), so an id is never
given twice, even after entries are removed. `benchmark.audit` appends each audit of an entry
to the entry's `audits`: every one stays on record, and the entry's verdict is over all of them
(`audit_standing`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
from pydantic import ValidationError, model_validator

from gameon.atomic import atomic_write, check_writable, defer_signals, file_lock
from gameon.benchmark.report import (
    budget_text,
    group_key,
    markdown_text,
    per_skill_iqm,
    protocol_name,
    target_success,
    unused_model,
)
from gameon.benchmark.stats import iqm, iqm_ci
from gameon.envs import ENV_SKILLS
from gameon.evaluation import SUITE_SEED, EvalReport, EvalTask, evaluation_suite
from gameon.experimenter.vlm.factory import BACKENDS, vlm_label
from gameon.integrity import file_sha256
from gameon.records import (
    RANKED_MODE,
    RECORD_FILE,
    Evaluation,
    RunRecord,
    StrictModel,
    load_record,
    record_from_bytes,
    validation_problems,
)

BOARD_FORMAT = "gameon-leaderboard-v1"
BOARD_FILE = "leaderboard.json"
MARKDOWN_FILE = "LEADERBOARD.md"
LOCK_FILE = ".leaderboard.lock"
ENTRIES_DIR = "leaderboard"
MIN_SEEDS = 3
TOLERANCE = 0.1
"""Largest absolute difference between a claimed and a re-evaluated success rate (verify)."""
CHANCE = 1e-6
"""Identical outcome vectors of two seeds are a copy only where chance agreement is below this."""
TRANSCRIPT_FILE = "transcript.jsonl"
CURVES_FILE = "curves.png"
"""A collect run's per-skill learning curves, which submit copies beside its record."""
REPRODUCED = ("reproduced", "within tolerance")
"""The outcomes of an audited run that reproduced its claim."""
PACKAGE = "gameon-rl"
_EXACT = 1e-9
RANK_DIGITS = 9
"""Decimals the ranking compares scores at: far below any difference of success rates."""
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


class BoardError(ValueError):
    """The board itself (leaderboard.json) is unreadable; it is left untouched."""


class BoardRun(StrictModel):
    """One run of an entry: its recomputed numbers and where its record's copy is."""

    run_id: str
    seed: int
    hash: str
    target_success: float
    per_skill: dict[str, float]
    git_commit: str
    record: str
    """the copy of the record, relative to the board folder"""
    checkpoint_sha256: str | None = None
    weights_sha256: str | None = None
    dataset_sha256: str | None = None
    outcomes_sha256: str | None = None
    """sha256 of every evaluation episode's (instruction, seed, success, return), all evaluations
    (None on entries made before it was kept: computed from the record copy)"""


class RunAudit(StrictModel):
    """One audited run: how the evaluation of its re-run training compares with its claim."""

    run_id: str
    seed: int
    outcome: Literal["reproduced", "within tolerance", "not reproduced", "not audited"]
    comparison: Literal["bitwise", "tolerance"] | None = None
    claimed: dict[str, float] = {}
    audited: dict[str, float] = {}
    bounds: dict[str, float] = {}
    """tolerance comparison: the largest accepted |claimed - audited| success per evaluation"""
    differing_episodes: int | None = None
    detail: str
    """why: what matched or differed, or why the run could not be audited"""


class EntryAudit(StrictModel):
    """One audit of an entry (`gameon leaderboard audit`): K sampled runs re-trained."""

    audited: bool
    """the entry's verdict once this audit was added: whether every run audited so far, by it or
    an earlier audit, reproduced its claim (bitwise or within the tolerance; see
    `audit_standing`)"""
    when: str
    runs: int
    sampling_seed: int
    sampled: list[str]
    tolerance: str
    """the rule applied where the comparison cannot be bitwise"""
    results: list[RunAudit]


class BoardEntry(StrictModel):
    """One accepted submission: the group, the recomputed aggregates and its runs."""

    id: str
    submitted: str
    protocol: str
    curriculum: str
    curriculum_label: str
    learner: str
    env_id: str
    env_version: int
    eval_env_id: str
    episodes_per_skill: int
    target_skills: list[str]
    gameon_version: str
    seeds: list[int]
    iqm: float
    ci_low: float
    ci_high: float
    mean: float
    suite_iqm: float
    """IQM of all-skills success (every episode of the suite), shown beside the ranked target"""
    monolithic_iqm: float | None = None
    """collect v2: IQM of the monolithic policy's target success, shown beside the ranked
    (composed) one; None for protocols without it"""
    per_skill_iqm: dict[str, float]
    verified: bool
    runs: list[BoardRun]
    audits: list[EntryAudit] = []
    """every audit of the entry, oldest first; none is ever replaced, so a failure stays on
    record"""
    budget: str | None = None
    """the runs' training budget as the board shows it (`budget_text`); None on entries stored
    before it was kept"""
    vlm_fallbacks: int | None = None
    """vlm entries: the runs' module calls whose choice fell back to learning progress (the
    model's answer missing, invalid or over the cost cap); None for other curricula and on
    entries stored before it was kept"""
    vlm_used_answers: int | None = None
    """vlm entries: the runs' module calls whose model answer was used; None where a record did
    not count them"""

    @model_validator(mode="before")
    @classmethod
    def _single_audit(cls, data: Any) -> Any:
        """Boards written before audits accumulated kept one `audit` (or null): read it as the
        entry's only audit."""
        if isinstance(data, dict) and "audit" in data and "audits" not in data:
            audit = data["audit"]
            data = {key: value for key, value in data.items() if key != "audit"}
            data["audits"] = [] if audit is None else [audit]
        return data


class Board(StrictModel):
    """The contents of leaderboard.json."""

    format: Literal["gameon-leaderboard-v1"] = BOARD_FORMAT
    entries: list[BoardEntry] = []
    next_number: int | None = None
    """the number of the next entry's id (None on boards made before it was kept)"""

    @model_validator(mode="after")
    def _ids_are_unique(self) -> Board:
        """An entry id names one entry (a hand merge of two boards may repeat one)."""
        ids = [entry.id for entry in self.entries]
        repeated = sorted({entry_id for entry_id in ids if ids.count(entry_id) > 1})
        if repeated:
            raise ValueError(f"entry ids must be unique; repeated: {', '.join(repeated)}")
        return self


@dataclass
class Submission:
    """The verdict on a submission: accepted with its entry id, or rejected with the reasons."""

    accepted: bool
    reasons: list[str] = field(default_factory=list)
    entry_id: str | None = None
    entry: BoardEntry | None = None


@dataclass(frozen=True)
class _Run:
    source: Path
    folder: Path
    text: bytes
    record: RunRecord
    checkpoint_sha256: str | None = None
    """the record's, or computed from the checkpoint file it points to"""

    @property
    def name(self) -> str:
        return f"run {self.record.run_id!r} ({self.source})"


def submit(
    paths: Sequence[str | Path],
    board_dir: str | Path = Path("results"),
    verify: bool = False,
    min_seeds: int = MIN_SEEDS,
    tolerance: float = TOLERANCE,
) -> Submission:
    """Validate the run records of one group and, if every check passes, add them to the board.
    ValueError if no paths are given or board_dir is a file or cannot be written (a usage error,
    not a rejected submission)."""
    board_dir = Path(board_dir)
    if not paths:
        raise ValueError(
            "no run records given: pass the record.json files or run folders of one group, "
            "e.g. gameon leaderboard submit runs/bench/paper/collect__Tower__lp__bc__s* "
            "--board results"
        )
    if board_dir.exists() and not board_dir.is_dir():
        raise ValueError(
            f"the board {board_dir} is a file, not a folder: give --board the folder of "
            f"{BOARD_FILE} and {MARKDOWN_FILE} (created if missing)"
        )
    check_board_writable(board_dir)
    read_board(board_dir)
    runs, reasons = _load(paths)
    for run in runs:
        reasons += check_record(run.record, run.name)
    if reasons:
        return Submission(False, reasons)
    reasons = check_group(runs, min_seeds) or _duplicates(runs, read_board(board_dir), board_dir)
    if not reasons and verify:
        reasons = [reason for run in runs for reason in verify_run(run, tolerance)]
    if reasons:
        return Submission(False, reasons)
    with file_lock(board_dir / LOCK_FILE):
        board = read_board(board_dir)
        reasons = _duplicates(runs, board, board_dir)
        if reasons:
            return Submission(False, reasons)
        entry = _store(runs, board, board_dir, verify)
    return Submission(True, [], entry.id, entry)


def check_board_writable(board_dir: Path) -> None:
    """Make the board folder and write a file there, so that a board that cannot take a new entry
    or audit (a read-only disk, another user's folder) is refused (ValueError) before the work.
    Folders it made are removed again, so a refused first submission leaves no empty board."""
    made = [folder for folder in (board_dir, *board_dir.parents) if not folder.exists()]
    try:
        check_writable(board_dir)
    except OSError as error:
        raise ValueError(
            f"cannot write to the board {board_dir}: {error.strerror or error}; nothing was "
            "changed: give --board a folder you can write to"
        ) from None
    finally:
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()


def read_board(board_dir: str | Path) -> Board:
    """The board in board_dir (empty if it has none yet); BoardError if leaderboard.json is
    corrupt."""
    path = Path(board_dir) / BOARD_FILE
    if not path.exists():
        return Board()
    try:
        return Board.model_validate_json(path.read_bytes())
    except (ValidationError, OSError) as error:
        raise BoardError(
            f"{path} is corrupt, so nothing was changed: it is left untouched, and nothing is "
            "submitted or audited until it is restored (e.g. from git; the records are under "
            f"{ENTRIES_DIR}/). What is wrong: {problems_text(error)}"
        ) from None


def problems_text(error: ValidationError | OSError, limit: int = 3) -> str:
    """What a failed read or validation found, as "where: what" for the first `limit` problems
    (the place a dotted path into the JSON), so the message says where to look."""
    if isinstance(error, OSError):
        return f"{type(error).__name__}: {error.strerror or error}"
    return validation_problems(error, limit)


def _load(paths: Sequence[str | Path]) -> tuple[list[_Run], list[str]]:
    runs, reasons = [], []
    for given in paths:
        path = Path(given)
        file = path / RECORD_FILE if path.is_dir() else path
        if not file.is_file():
            what = (
                f"the folder holds no {RECORD_FILE}" if path.is_dir() else "no such file or folder"
            )
            reasons.append(f"{path}: missing: {what}; give record.json files or run folders")
            continue
        text = file.read_bytes()
        try:
            record_from_bytes(text, file)  # the schema message, as load_record gives it
            record = strict_record(text, file)
        except ValueError as error:
            reasons.append(f"{path}: schema: {error}")
            continue
        outside = outside_paths(record, file.parent)
        if outside:
            reasons += [f"{path}: paths: {problem}" for problem in outside]
            continue
        digest, problem = _checkpoint_hash(record, file.parent)
        if problem:
            reasons.append(f"{path}: evidence: {problem}")
            continue
        runs.append(_Run(path, file.parent, text, record, digest))
    return runs, reasons


def strict_record(text: bytes, file: Path) -> RunRecord:
    """The record in `text`, validated without converting a value of the wrong JSON type (a seed
    of "0" is not read as 0): a record the harness wrote has none, a hand edit may. ValueError
    names each such value."""
    try:
        return RunRecord.model_validate_json(text, strict=True)
    except ValidationError as error:
        raise ValueError(
            f"{file} holds a value of the wrong type, as a hand edit leaves it (a submitted "
            f"record is read as written, nothing converted): "
            f"{validation_problems(error, inputs=True)}"
        ) from None


def record_paths(record: RunRecord, folder: Path) -> list[tuple[str, str, Path]]:
    """The files a submission reads from a run folder, as (field, value, path): the record's
    checkpoint, if it names one, and its VLM transcript."""
    named = [("checkpoint", record.checkpoint), _transcript_field(record)]
    return [(field, value, folder / value) for field, value in named if value]


def _transcript_field(record: RunRecord) -> tuple[str, str]:
    """The field naming a run's VLM transcript and its value: training.transcript, else the
    transcript.jsonl a run folder holds by default."""
    training = record.training
    if training is not None and training.transcript:
        return "training.transcript", training.transcript
    return "the run folder's transcript", TRANSCRIPT_FILE


def outside_paths(record: RunRecord, folder: Path) -> list[str]:
    """The files a record names that resolve (symlinks followed) outside its run folder, each
    said with the field, the value and where it leads."""
    root = folder.resolve()
    return [
        f"{field} {value!r} resolves to {path.resolve()}, outside the run folder {root}: a "
        "record may name only files inside its run folder (relative paths, no link out of it)"
        for field, value, path in record_paths(record, folder)
        if not path.resolve().is_relative_to(root)
    ]


def _checkpoint_hash(record: RunRecord, folder: Path) -> tuple[str | None, str | None]:
    """The checkpoint's sha256 (computed from its file where it exists, else the record's) and
    what is wrong if the file's differs from the record's."""
    path = folder / record.checkpoint if record.checkpoint else None
    if path is None or not path.is_file():
        return record.checkpoint_sha256, None
    actual = file_sha256(path)
    claimed = record.checkpoint_sha256
    if claimed is not None and claimed != actual:
        return None, (
            f"checkpoint {path} has sha256 {actual[:12]}..., the record claims {claimed[:12]}..."
        )
    return actual, None


def check_record(record: RunRecord, name: str) -> list[str]:
    """Everything one record must satisfy on its own: env, versions, suite, claimed numbers, and
    for a vlm run a model that answered."""
    return (
        _check_env(record, name)
        + _check_versions(record, name)
        + _check_suite(record, name)
        + _check_claims(record, name)
        + _check_vlm(record, name)
    )


def _check_vlm(record: RunRecord, name: str) -> list[str]:
    """A vlm run none of whose model's answers was used practised what the learning-progress
    fallback chose: not a result of the model, so not one to rank under its label."""
    reason = unused_model(record)
    if reason is None:
        return []
    capped = f", {record.vlm.capped_calls} at the cost cap" if record.vlm.capped_calls else ""
    return [
        f"{name}: vlm: {reason} ({record.vlm.fallbacks} module calls fell back to learning "
        f"progress{capped}), so its practice was the fallback's, not "
        f"{record.curriculum_label}'s; run it again once the model answers (its transcript says "
        "what went wrong)"
    ]


def _check_env(record: RunRecord, name: str) -> list[str]:
    import gameon.envs  # noqa: F401  (registers the ids)

    reasons = []
    for env_id in dict.fromkeys((record.env_id, record.evaluation.env_id)):
        if env_id not in gym.registry:
            reasons.append(f"{name}: env: {env_id!r} is not a registered env id here")
    if record.env_id in gym.registry and gym.spec(record.env_id).version != record.env_version:
        version = gym.spec(record.env_id).version
        reasons.append(
            f"{name}: env: env_version {record.env_version} but {record.env_id} is v{version}"
        )
    return reasons


def _check_versions(record: RunRecord, name: str) -> list[str]:
    reasons = []
    if not record.versions.get(PACKAGE):
        reasons.append(f"{name}: versions: no {PACKAGE} version in versions")
    if not record.git_commit or not _COMMIT.fullmatch(record.git_commit):
        reasons.append(f"{name}: versions: git_commit {record.git_commit!r} is not a commit hash")
    return reasons


@lru_cache(maxsize=32)
def shared_suite(env_id: str, episodes_per_skill: int) -> tuple[tuple[str, int], ...]:
    """The (instruction, seed) pairs every record of this env and size must be evaluated on."""
    tasks = evaluation_suite(env_id, episodes_per_skill, SUITE_SEED)
    return tuple((task.instruction, task.seed) for task in tasks)


def _check_suite(record: RunRecord, name: str) -> list[str]:
    reasons = _check_evaluation_suite(record.evaluation, name)
    for target in record.target_evaluations:
        where = f"{name} ({target.mode} on {target.evaluation.env_id})"
        reasons += _check_evaluation_suite(target.evaluation, where)
    return reasons


def _check_evaluation_suite(evaluation: Evaluation, name: str) -> list[str]:
    if evaluation.suite_seed != SUITE_SEED:
        return [
            f"{name}: suite: suite_seed {evaluation.suite_seed}, the shared suite's is {SUITE_SEED}"
        ]
    if evaluation.env_id not in gym.registry:
        return []
    expected = shared_suite(evaluation.env_id, evaluation.episodes_per_skill)
    claimed = tuple((e.instruction, e.seed) for e in evaluation.episodes)
    if claimed == expected:
        return []
    where = f"{evaluation.env_id}, {evaluation.episodes_per_skill} per skill"
    if len(claimed) != len(expected):
        return [
            f"{name}: suite: {len(claimed)} episodes, the shared suite ({where}) has "
            f"{len(expected)}"
        ]
    index = next(i for i, (a, b) in enumerate(zip(claimed, expected, strict=True)) if a != b)
    return [
        f"{name}: suite: episode {index} is {claimed[index]}, the shared suite ({where}) has "
        f"{expected[index]}"
    ]


def _check_claims(record: RunRecord, name: str) -> list[str]:
    reasons = []
    last = record.curve[-1]
    actual = record.evaluation.success_rate()
    episodes = len(record.evaluation.episodes)
    if abs(last.success_rate - actual) > _EXACT:
        reasons.append(
            f"{name}: tampered: curve[-1].success_rate claims {last.success_rate:.4f} but its "
            f"{episodes} evaluation episodes give {actual:.4f}"
        )
    per_skill = record.evaluation.per_skill()
    if set(last.per_skill) != set(per_skill):
        reasons.append(
            f"{name}: tampered: curve[-1].per_skill has skills {sorted(last.per_skill)}, "
            f"its evaluation episodes {sorted(per_skill)}"
        )
    else:
        for skill, rate in per_skill.items():
            if abs(last.per_skill[skill] - rate) > _EXACT:
                reasons.append(
                    f"{name}: tampered: curve[-1].per_skill[{skill!r}] claims "
                    f"{last.per_skill[skill]:.4f} but its episodes give {rate:.4f}"
                )
    collected = record.collected
    if collected is not None and collected.episodes != sum(collected.skills.values()):
        reasons.append(
            f"{name}: tampered: collected.episodes {collected.episodes} but its skill counts "
            f"sum to {sum(collected.skills.values())}"
        )
    reasons += [f"{name}: tampered: {problem}" for problem in contradictions(record)]
    return reasons


def training_config(record: RunRecord) -> tuple[dict[str, Any], str] | None:
    """The config a record says it trained with, and the field holding it: training.config, or
    for older collect records extra["config"]; None if it holds none."""
    if record.training is not None:
        return dict(record.training.config), "training.config"
    if record.protocol == "collect" and isinstance(record.extra.get("config"), dict):
        return dict(record.extra["config"]), 'extra["config"]'
    return None


def contradictions(record: RunRecord) -> list[str]:
    """Where a record contradicts itself: its target skills and its env's, its seed, learner
    (collect), curriculum, env or budget and its own training config, its curve going on past
    mastery with auto_stop on in its config (`_early_mastery`), or its env steps, curve and start
    and its budget. The audit finds such a record not reproduced before any training; a submission
    holding one is rejected."""
    problems = []
    targets = list(ENV_SKILLS[record.env_id][0])
    if sorted(record.target_skills) != sorted(targets):
        problems.append(
            f"target_skills {record.target_skills} but {record.env_id}'s target skills are "
            f"{targets} (the target success is over them)"
        )
    found = training_config(record)
    if found is not None:
        config = found[0]
        claims = {
            "seed": record.seed,
            "curriculum": record.curriculum,
            "env_id": record.env_id,
            **record.budget,
        }
        if record.protocol == "collect":
            claims["learner"] = record.learner
        differ = [
            f"{key} {claimed!r} in the record, {config.get(key)!r} in its config"
            for key, claimed in claims.items()
            if config.get(key) != claimed
        ]
        label = _label_of(record, config)
        if label is not None and record.curriculum_label != label:
            differ.append(
                f"curriculum_label {record.curriculum_label!r} in the record, but its config's "
                f"curriculum is labelled {label!r}"
            )
        if differ:
            problems.append("the record contradicts its own config: " + "; ".join(differ))
        early = _early_mastery(record, config)
        if early:
            problems.append(f"the record contradicts its own config: {early}")
    beyond = _beyond_budget(record)
    if beyond:
        problems.append("the record contradicts its own budget: " + "; ".join(beyond))
    return problems


def _label_of(record: RunRecord, config: dict[str, Any]) -> str | None:
    """The label a run of this config is ranked under (the curriculum's name; for vlm its backend
    and model, the one the run recorded where the config left it to the default), or None where
    the config does not say."""
    curriculum = config.get("curriculum")
    if curriculum != "vlm":
        return curriculum if isinstance(curriculum, str) else None
    backend = config.get("vlm_backend")
    if not isinstance(backend, str) or backend not in BACKENDS:
        return None
    model = config.get("vlm_model") or (record.vlm.model if record.vlm.backend == backend else None)
    return vlm_label(backend, model)


def _early_mastery(record: RunRecord, config: dict[str, Any]) -> str | None:
    """Where a collect run with auto_stop on went on past an iteration whose evaluation mastered
    its target skills (each at stop_threshold or above): a run of this config stops there. A run
    started with auto_stop off and resumed with it on has such a curve, and its claim cannot be
    re-run from its config."""
    if record.protocol != "collect" or config.get("auto_stop") is not True:
        return None
    threshold = config.get("stop_threshold")
    if not isinstance(threshold, int | float):
        return None
    for point in record.curve[:-1]:
        if all(point.per_skill.get(skill, 0.0) >= threshold for skill in record.target_skills):
            return (
                f"auto_stop is on and every target skill reached stop_threshold {threshold} at "
                f"iteration {point.step}, yet the curve goes on to iteration "
                f"{record.curve[-1].step}: a run of this config stops at {point.step} (was it "
                "resumed with auto_stop turned on?)"
            )
    return None


def _beyond_budget(record: RunRecord) -> list[str]:
    """Where a record's env steps, curve or start do not fit its budget. An online run trains
    until it has taken total_timesteps env steps and evaluates last at its final step; a collect
    run's curve counts iterations, up to its budget's (fewer if it stopped early), and it started
    with at most those iterations (`training.start_iterations`: an extension only adds)."""
    last = record.curve[-1].step
    problems = []
    if record.curve_unit == "env_steps":
        if last != record.env_steps:
            problems.append(
                f"curve[-1].step {last} but env_steps {record.env_steps} (the last point is "
                "the final evaluation, at the end of training)"
            )
        total = record.budget.get("total_timesteps")
        if total is not None and record.env_steps < total:
            problems.append(
                f"env_steps {record.env_steps}, fewer than the budget's total_timesteps {total} "
                "(an online run trains until it has taken them all)"
            )
    iterations = record.budget.get("iterations")
    if record.curve_unit == "iterations" and iterations is not None and last > iterations:
        problems.append(f"curve[-1].step {last}, beyond the budget's {iterations} iterations")
    start = record.training.start_iterations if record.training else None
    if start is not None and iterations is not None and start > iterations:
        problems.append(
            f"training.start_iterations {start}, more than the budget's {iterations} iterations "
            "(a resumed run may only add iterations)"
        )
    return problems


def check_group(runs: Sequence[_Run], min_seeds: int) -> list[str]:
    """One group, the same evaluations (env, mode, size) for all, distinct run ids and seeds,
    enough seeds."""
    reasons = []
    keys = {group_key(run.record) for run in runs}
    if len(keys) > 1:
        listed = "; ".join(f"{run.record.run_id}: {group_key(run.record)}" for run in runs)
        reasons.append(
            "group: a submission is one (protocol, curriculum_label, learner, env_id); "
            f"got {listed}"
        )
    suites: dict[str, list[str]] = {}
    for run in runs:
        suites.setdefault(evaluations_text(run.record), []).append(repr(run.record.run_id))
    if len(suites) > 1:
        listed = "; ".join(f"{', '.join(ids)}: {sizes}" for sizes, ids in suites.items())
        reasons.append(
            "suite: the runs were evaluated on different suites (every evaluation, final and "
            f"target, must have the same env, mode and episodes per skill in all runs): {listed}"
        )
    budgets = {budget_text(run.record.budget) for run in runs}
    if len(budgets) > 1:
        reasons.append(f"budget: the runs trained on different budgets {sorted(budgets)}")
    for attribute in ("run_id", "seed"):
        seen: dict[object, str] = {}
        for run in runs:
            value = getattr(run.record, attribute)
            if value in seen:
                reasons.append(f"seeds: {attribute} {value!r} twice: {seen[value]} and {run.name}")
            seen[value] = run.name
    seeds = {run.record.seed for run in runs}
    if len(seeds) < min_seeds:
        reasons.append(
            f"seeds: {len(seeds)} distinct seed(s) {sorted(seeds)}; a submission needs at least "
            f"{min_seeds}"
        )
    return reasons


def evaluations_text(record: RunRecord) -> str:
    """The record's evaluations as "final ENV (N per skill)", then "MODE ENV (N per skill)" for
    each target evaluation by mode and env: what must agree across a submission's runs."""
    evaluations = [("final", record.evaluation)]
    evaluations += sorted(
        ((t.mode, t.evaluation) for t in record.target_evaluations),
        key=lambda pair: (pair[0], pair[1].env_id),
    )
    return ", ".join(
        f"{mode} {evaluation.env_id} ({evaluation.episodes_per_skill} per skill)"
        for mode, evaluation in evaluations
    )


def verify_run(run: _Run, tolerance: float = TOLERANCE) -> list[str]:
    """Reload the run's checkpoint, re-run its suite, and compare with the claimed episodes."""
    import torch

    from gameon.evaluation import evaluate
    from gameon.policy import load_policy

    record = run.record
    if record.checkpoint is None:
        return [f"{run.name}: verify: the record names no checkpoint to re-evaluate"]
    try:
        policy = load_policy(run.folder / record.checkpoint)
    except ValueError as error:
        return [f"{run.name}: verify: {error}"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        suite = [EvalTask(e.instruction, e.seed) for e in record.evaluation.episodes]
        report = evaluate(policy, record.evaluation.env_id, suite=suite)
    finally:
        torch.set_num_threads(threads)
    claimed = record.evaluation
    counts = {f"final {claimed.env_id}": _differing(claimed, report)}
    reproduced = {"success rate": report.success_rate, **report.rates()}
    claims = {"success rate": claimed.success_rate(), **claimed.per_skill()}
    targets = tuple(record.target_skills)
    if not record.target_evaluations and set(targets) != set(claims) - {"success rate"}:
        # collect v2 claims its target success from the target evaluations, re-run below
        target_episodes = [e.success for e in report.episodes if e.skill in targets]
        reproduced["target success"] = sum(target_episodes) / len(target_episodes)
        claims["target success"] = record.target_success
    for target in record.target_evaluations:
        what = f"{target.mode} {target.evaluation.env_id}"
        claims[what] = target.evaluation.success_rate()
        try:
            again = _reevaluate_target(run, target.mode, target.evaluation)
        except ValueError as error:
            return [f"{run.name}: verify: cannot re-run its {what} evaluation: {error}"]
        reproduced[what] = again.success_rate
        counts[what] = _differing(target.evaluation, again)
    mismatches = [
        f"{what} {claims[what]:.3f} claimed, {value:.3f} reproduced"
        for what, value in reproduced.items()
        if abs(claims[what] - value) > tolerance
    ]
    if not mismatches:
        return []
    return [
        f"{run.name}: verify: its checkpoint does not reproduce the claim within {tolerance}: "
        f"{'; '.join(mismatches)} ({_differing_text(counts)})"
    ]


def _differing(claimed: Evaluation, report: EvalReport) -> tuple[int, int]:
    """How many of the claimed episodes the re-run's outcome contradicts, matched by (instruction,
    seed), an episode the re-run lacks counting as differing; and how many were claimed."""
    again = {(e.instruction, e.seed): e.success for e in report.episodes}
    differing = sum(again.get((e.instruction, e.seed)) != e.success for e in claimed.episodes)
    return differing, len(claimed.episodes)


def _differing_text(counts: dict[str, tuple[int, int]]) -> str:
    """The differing episodes over every evaluation re-run, then per evaluation where there are
    several: "2 of 9 episodes differ: final E 0 of 7, monolithic E 1 of 1, composed E 1 of 1"."""
    differing = sum(count for count, _ in counts.values())
    total = sum(episodes for _, episodes in counts.values())
    text = f"{differing} of {total} episodes differ"
    if len(counts) == 1:
        return text
    return text + ": " + ", ".join(f"{what} {n} of {m}" for what, (n, m) in counts.items())


def _reevaluate_target(run: _Run, mode: str, claimed: Evaluation) -> EvalReport:
    """Run a collect v2 target evaluation again from the run folder's checkpoint: monolithic on
    the claimed suite, composed with the skill library the record carries (ValueError if it
    carries none that loads)."""
    from gameon.evaluation import evaluate
    from gameon.policy import load_policy

    checkpoint = run.folder / run.record.checkpoint
    if mode == "monolithic":
        suite = [EvalTask(e.instruction, e.seed) for e in claimed.episodes]
        return evaluate(load_policy(checkpoint), claimed.env_id, suite=suite)
    from gameon.experimenter.embodiment import evaluate_composed, learned_library
    from gameon.experimenter.skills import SkillLibrary

    if "library" not in run.record.extra:
        raise ValueError('the record carries no skill library (extra["library"]) to compose with')
    library = learned_library(SkillLibrary.from_dict(run.record.extra["library"]), checkpoint)
    practice = run.record.extra.get("practice_env_id", "GameOn/MultiSkill-v0")
    return evaluate_composed(library, claimed.env_id, claimed.episodes_per_skill, practice)


def run_hash(record: RunRecord) -> str:
    """Content hash of a run's identity and evaluation episodes (not its run id or timings)."""
    identity = {
        "protocol": record.protocol,
        "curriculum": record.curriculum,
        "curriculum_label": record.curriculum_label,
        "learner": record.learner,
        "env_id": record.env_id,
        "seed": record.seed,
        "evaluation": record.evaluation.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def outcome_vector(record: RunRecord) -> list[list]:
    """Every evaluation's episodes as (instruction, seed, success, return), final evaluation
    first, then the target evaluations."""
    evaluations = [("final", record.evaluation)]
    evaluations += [(t.mode, t.evaluation) for t in record.target_evaluations]
    return [
        [mode, evaluation.env_id, e.instruction, e.seed, e.success, e.episode_return]
        for mode, evaluation in evaluations
        for e in evaluation.episodes
    ]


def outcomes_hash(record: RunRecord) -> str:
    """sha256 of the record's outcome vector (see outcome_vector)."""
    return hashlib.sha256(json.dumps(outcome_vector(record)).encode()).hexdigest()


def chance_agreement(record: RunRecord) -> float:
    """The probability that an independent run with the same per-skill success rates matches
    this record's successes on every episode of every evaluation: the product over episodes of
    p^2 + (1 - p)^2, p the episode's skill's rate in its evaluation (returns ignored, so an
    upper bound)."""
    chance = 1.0
    for evaluation in [record.evaluation, *(t.evaluation for t in record.target_evaluations)]:
        rates = evaluation.per_skill()
        for episode in evaluation.episodes:
            rate = rates[episode.skill]
            chance *= rate**2 + (1 - rate) ** 2
    return chance


@dataclass(frozen=True)
class _Evidence:
    name: str
    seed: int
    checkpoint: str | None
    weights: str | None
    outcomes: str | None


def _evidence_of(run: _Run) -> _Evidence:
    record = run.record
    return _Evidence(
        run.name, record.seed, run.checkpoint_sha256, record.weights_sha256, outcomes_hash(record)
    )


def _board_evidence(board: Board, board_dir: Path) -> list[_Evidence]:
    """The evidence of every run on the board; what older entries lack is read from the record
    copies (an unreadable copy gives none)."""
    evidence = []
    for entry in board.entries:
        for run in entry.runs:
            name = f"run {run.run_id!r} (seed {run.seed}) of entry {entry.id}"
            found = _Evidence(
                name, run.seed, run.checkpoint_sha256, run.weights_sha256, run.outcomes_sha256
            )
            if run.outcomes_sha256 is None:
                try:
                    copy = load_record(board_dir / run.record)
                except ValueError:
                    continue
                found = _Evidence(
                    name,
                    run.seed,
                    run.checkpoint_sha256 or copy.checkpoint_sha256,
                    run.weights_sha256 or copy.weights_sha256,
                    outcomes_hash(copy),
                )
            evidence.append(found)
    return evidence


def _duplicates(runs: Sequence[_Run], board: Board, board_dir: Path) -> list[str]:
    """Runs already on the board or twice in the submission, by content hash, checkpoint,
    weights, or (seeds differing) outcome vector."""
    on_board = {run.hash: entry.id for entry in board.entries for run in entry.runs}
    reasons, seen = [], {}
    known = _board_evidence(board, board_dir)
    for run in runs:
        digest = run_hash(run.record)
        if digest in on_board:
            reasons.append(
                f"{run.name}: duplicate: already on the board in entry {on_board[digest]}"
            )
        elif digest in seen:
            reasons.append(f"{run.name}: duplicate: the same run as {seen[digest]}")
        else:
            reasons += _shared_evidence(run, known)
        seen[digest] = run.name
        known.append(_evidence_of(run))
    return reasons


def _shared_evidence(run: _Run, known: Sequence[_Evidence]) -> list[str]:
    """Why `run` is a copy of one of `known`, by checkpoint, weights or outcome vector."""
    mine = _evidence_of(run)
    checks = (
        ("checkpoint", "its checkpoint file has the sha256 {value} of {other}"),
        ("weights", "its trained weights (sha256 {value}) are those of {other}"),
    )
    reasons = []
    for attribute, text in checks:
        value = getattr(mine, attribute)
        other = next((k for k in known if value and getattr(k, attribute) == value), None)
        if other is not None:
            where = text.format(value=f"{value[:12]}...", other=other.name)
            reasons.append(f"{run.name}: duplicate: {where}")
    chance = chance_agreement(run.record)
    if chance < CHANCE:
        other = next(
            (k for k in known if k.outcomes == mine.outcomes and k.seed != mine.seed), None
        )
        if other is not None:
            reasons.append(
                f"{run.name}: duplicate: every evaluation episode's outcome and return equals "
                f"those of {other.name}, whose seed differs ({mine.seed} vs {other.seed}); "
                f"independent runs would agree with probability {chance:.1e}"
            )
    return reasons


def _store(runs: Sequence[_Run], board: Board, board_dir: Path, verified: bool) -> BoardEntry:
    """Copy the records, then append the entry to leaderboard.json and rewrite LEADERBOARD.md."""
    runs = sorted(runs, key=lambda r: r.record.seed)
    digest = hashlib.sha256("".join(run_hash(r.record) for r in runs).encode()).hexdigest()
    number = next_entry_number(board)
    entry_id = f"{number:04d}-{digest[:8]}"
    folder = board_dir / ENTRIES_DIR / entry_id
    if folder.exists():  # the copies of an interrupted submission, which never entered the board
        shutil.rmtree(folder)
    board_runs = []
    for index, run in enumerate(runs):
        copy = folder / f"{index:02d}_{_safe(run.record.run_id)}" / RECORD_FILE
        atomic_write(copy, run.text)
        transcript = _transcript(run)
        if transcript is not None:
            atomic_write(copy.parent / TRANSCRIPT_FILE, transcript.read_bytes())
        curves = _curves(run)
        if curves is not None:
            atomic_write(copy.parent / CURVES_FILE, curves.read_bytes())
        board_runs.append(_board_run(run, copy.relative_to(board_dir)))
    entry = _entry(entry_id, [r.record for r in runs], board_runs, verified)
    updated = Board(entries=[*board.entries, entry], next_number=number + 1)
    write_board(board_dir, updated)
    return entry


def write_board(board_dir: Path, board: Board) -> None:
    """Write leaderboard.json and LEADERBOARD.md, each atomically and Ctrl-C held back between
    them, so the table never misses what the board holds."""
    with defer_signals():
        atomic_write(board_dir / BOARD_FILE, board.model_dump_json(indent=1) + "\n")
        atomic_write(board_dir / MARKDOWN_FILE, render_markdown(board))


def entry_number(entry_id: str) -> int:
    """The counter part of an entry id ("0007-1a2b3c4d" -> 7; 0 if it has none)."""
    head = entry_id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def next_entry_number(board: Board) -> int:
    """The number of the next entry: the board's counter, and above every number in use."""
    largest = max((entry_number(entry.id) for entry in board.entries), default=0)
    return max(board.next_number or 1, largest + 1)


def _transcript(run: _Run) -> Path | None:
    """The run folder's VLM transcript, kept beside the record copy so an audit can replay it."""
    path = run.folder / _transcript_field(run.record)[1]
    return path if path.is_file() else None


def _curves(run: _Run) -> Path | None:
    """The run folder's learning curves (a collect run's plot), kept beside the record copy for
    the page to link; None where there is none, or the name leads out of the run folder."""
    path = run.folder / CURVES_FILE
    inside = path.resolve().is_relative_to(run.folder.resolve())
    return path if inside and path.is_file() else None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:80] or "run"


def _board_run(run: _Run, copy: Path) -> BoardRun:
    record = run.record
    return BoardRun(
        run_id=record.run_id,
        seed=record.seed,
        hash=run_hash(record),
        target_success=record.target_success,
        per_skill=record.evaluation.per_skill(),
        git_commit=record.git_commit or "",
        record=str(copy),
        checkpoint_sha256=run.checkpoint_sha256,
        weights_sha256=record.weights_sha256,
        dataset_sha256=record.dataset_sha256,
        outcomes_sha256=outcomes_hash(record),
    )


def _entry(
    entry_id: str, records: list[RunRecord], runs: list[BoardRun], verified: bool
) -> BoardEntry:
    first = records[0]
    ranked = first.target_evaluation(RANKED_MODE) or first.evaluation
    scores = target_success(records)
    estimate = iqm_ci([scores])
    return BoardEntry(
        id=entry_id,
        submitted=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        protocol=protocol_name(first),
        curriculum=first.curriculum,
        curriculum_label=first.curriculum_label,
        learner=first.learner,
        env_id=first.env_id,
        env_version=first.env_version,
        eval_env_id=first.evaluation.env_id,
        episodes_per_skill=ranked.episodes_per_skill,
        target_skills=first.target_skills,
        gameon_version=first.versions.get(PACKAGE) or "",
        seeds=[r.seed for r in records],
        iqm=estimate.value,
        ci_low=estimate.low,
        ci_high=estimate.high,
        mean=sum(scores) / len(scores),
        suite_iqm=iqm([r.evaluation.success_rate() for r in records]),
        monolithic_iqm=_monolithic_iqm(records),
        per_skill_iqm=per_skill_iqm(records),
        verified=verified,
        runs=runs,
        budget=budget_text(first.budget),
        **_vlm_counts(records),
    )


def _vlm_counts(records: Sequence[RunRecord]) -> dict[str, int | None]:
    """The entry's vlm_fallbacks and vlm_used_answers, summed over its runs (None for a
    curriculum without a model; used answers None where a record did not count them)."""
    if records[0].curriculum != "vlm":
        return {}
    used = [r.vlm.used_answers for r in records]
    return {
        "vlm_fallbacks": sum(r.vlm.fallbacks for r in records),
        "vlm_used_answers": None if None in used else sum(used),
    }


def _monolithic_iqm(records: Sequence[RunRecord]) -> float | None:
    evaluations = [r.target_evaluation("monolithic") for r in records]
    if any(e is None for e in evaluations):
        return None
    return iqm([e.success_rate(tuple(records[0].target_skills)) for e in evaluations])


def shown_protocol(protocol: str) -> str:
    """The protocol as the board shows it: the first collect protocol is marked v1, and the v2
    entries stored before the collector was part of the name were all the mixed collector's."""
    return {"collect": "collect v1", "collect v2": "collect v2 (mixed)"}.get(protocol, protocol)


def audit_standing(audits: Sequence[EntryAudit]) -> dict[str, str]:
    """Where each run ever audited stands over all the entry's audits: "not reproduced" if any
    audit failed to reproduce its claim (a later success does not undo it: a run that reproduces
    only sometimes does not reproduce), else "reproduced" if any audit reproduced it, else "not
    audited" (no audit could compare it, e.g. its config was refused here: one made later, at
    the record's commit, may)."""
    outcomes: dict[str, set[str]] = {}
    for audit in audits:
        for result in audit.results:
            outcomes.setdefault(result.run_id, set()).add(result.outcome)
    standing = {}
    for run_id, seen in outcomes.items():
        if "not reproduced" in seen:
            standing[run_id] = "not reproduced"
        elif seen & set(REPRODUCED):
            standing[run_id] = "reproduced"
        else:
            standing[run_id] = "not audited"
    return standing


def audit_verdict(audits: Sequence[EntryAudit]) -> bool:
    """The entry's verdict over all its audits: audited (yes) when every run ever audited stands
    reproduced (`audit_standing`); a run that once failed keeps it at no."""
    standing = audit_standing(audits)
    return bool(standing) and all(value == "reproduced" for value in standing.values())


def audit_cell(audits: Sequence[EntryAudit]) -> str:
    """How LEADERBOARD.md shows an entry's audits: the verdict over all of them, the runs that
    stand reproduced of those ever audited, and the latest audit's date, e.g. "no (2/3,
    2026-12-02)"."""
    if not audits:
        return "-"
    standing = audit_standing(audits)
    good = sum(value == "reproduced" for value in standing.values())
    verdict = "yes" if audit_verdict(audits) else "no"
    return f"{verdict} ({good}/{len(standing)}, {audits[-1].when[:10]})"


def vlm_fallback_share(entry: BoardEntry) -> float | None:
    """The share of a vlm entry's module calls that fell back to learning progress; None where
    it is unknown or the curriculum asks no model."""
    if entry.vlm_fallbacks is None or entry.vlm_used_answers is None:
        return None
    calls = entry.vlm_fallbacks + entry.vlm_used_answers
    return entry.vlm_fallbacks / calls if calls else None


def vlm_cell(entry: BoardEntry) -> str:
    """How the board shows a vlm entry's fallbacks: "3 of 120 (2.5%)", just "3" where the used
    answers were not counted, "-" for other curricula."""
    if entry.vlm_fallbacks is None:
        return "-"
    share = vlm_fallback_share(entry)
    if share is None:
        return str(entry.vlm_fallbacks)
    calls = entry.vlm_fallbacks + (entry.vlm_used_answers or 0)
    return f"{entry.vlm_fallbacks} of {calls} ({share:.1%})"


def rank_score(entry: BoardEntry) -> tuple[float, float]:
    """The (IQM, mean) an entry ranks by, rounded to RANK_DIGITS: the same rates summed in
    another order differ in the last bit (0.1 + 0.2 + 0.3 against 0 + 0.3 + 0.3), and such
    equal scores must share a rank rather than be ordered by rounding noise."""
    return round(entry.iqm, RANK_DIGITS), round(entry.mean, RANK_DIGITS)


def ranked(entries: list[BoardEntry]) -> list[tuple[int, BoardEntry]]:
    """(rank, entry) in the board's order: by target-success IQM, then mean, within each
    (protocol, env, budget); equal scores share a rank."""
    rows: list[tuple[int, BoardEntry]] = []

    def group(entry: BoardEntry) -> tuple[str, str, str]:
        return entry.protocol, entry.env_id, entry.budget or ""

    def order(entry: BoardEntry) -> tuple[Any, ...]:
        iqm_score, mean_score = rank_score(entry)
        return (*group(entry), -iqm_score, -mean_score, entry.id)

    entries = sorted(entries, key=order)
    rank, first, previous = 0, 0, None
    for position, entry in enumerate(entries):
        current = (group(entry), rank_score(entry))
        if previous is None or previous[0] != current[0]:
            first = position
        if previous != current:
            rank = position - first + 1
        previous = current
        rows.append((rank, entry))
    return rows


def render_markdown(board: Board) -> str:
    """LEADERBOARD.md: entries ranked by target-success IQM within each (protocol, env,
    budget)."""
    lines = [
        "# Leaderboard",
        "",
        "Generated from `leaderboard.json` by `gameon leaderboard submit`; do not edit by hand.",
        "Target success is recomputed from each run's evaluation episodes on the shared suite and",
        "aggregated over seeds: interquartile mean (IQM) with a 95% stratified-bootstrap interval.",
        "Entries rank by target-success IQM, then mean, within each (protocol, env, budget); equal",
        "scores share a rank. All-skills IQM (every episode of the suite) is shown, not ranked.",
        "Collect v2 (the learner collects its own data) ranks the composed policy's target success",
        "(the task run as the skill library decomposes it, every step by the learned policy) and",
        "shows the monolithic policy's (conditioned on the task's goal) beside it; its collector",
        "is in parentheses (demo: the expert demonstrates each task the learner failed, as a",
        "separate episode; mixed: the expert takes over a failed skill mid-episode), and entries",
        "of different collectors are ranked apart. Collect v1 entries (scripted experts collected",
        "every episode) are kept for the record.",
        "Audited: `gameon leaderboard audit` re-trained sampled runs from their records; yes when",
        "every run audited so far reproduced its claimed evaluation (bitwise, or within the",
        "stated tolerance on another machine or library version), over all the entry's audits: a",
        "run that once failed to reproduce keeps it at no. Shown: runs reproduced / runs audited,",
        "and the date of the latest audit.",
        "VLM fallbacks: of a vlm entry's module calls (propose, decompose, analyse, ...), those",
        "whose choice fell back to learning progress because the model's answer was missing,",
        "invalid or over the cost cap: the practice the model did not choose.",
        "",
        "| rank | protocol | env | curriculum | learner | seeds | IQM [95% CI] | mean | "
        "monolithic IQM | all-skills IQM | eval episodes/skill | budget | VLM fallbacks "
        "| verified | audited | submitted | commit | entry |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- | --- | --- | --- |",
    ]
    for rank, entry in ranked(board.entries):
        commits = sorted({run.git_commit[:7] for run in entry.runs})
        cells = [
            rank,
            shown_protocol(entry.protocol),
            f"`{entry.env_id}`",
            entry.curriculum_label,
            entry.learner,
            len(entry.seeds),
            f"{entry.iqm:.2f} [{entry.ci_low:.2f}, {entry.ci_high:.2f}]",
            f"{entry.mean:.2f}",
            "-" if entry.monolithic_iqm is None else f"{entry.monolithic_iqm:.2f}",
            f"{entry.suite_iqm:.2f}",
            entry.episodes_per_skill,
            entry.budget or "-",
            vlm_cell(entry),
            "yes" if entry.verified else "no",
            audit_cell(entry.audits),
            entry.submitted[:10],
            ", ".join(commits),
            entry.id,
        ]
        lines.append("| " + " | ".join(markdown_text(c) for c in cells) + " |")
    if not board.entries:
        lines.append("")
        lines.append("No entries yet.")
    return "\n".join(lines) + "\n"
