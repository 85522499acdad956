"""The training audit: `gameon leaderboard audit ENTRY --runs K`.

K runs of a leaderboard entry are sampled (a seeded draw, stated), each one's training is re-run
from the configuration its record holds (`training.config`, or for older collect records
`extra["config"]`: the LoopConfig or the learner's Args, the curriculum, its settings and the VLM
backend), and the evaluation it gets is compared with the claim. A collect run extended with more
iterations whose curriculum reads the run's budget (hand: its stage windows, sized from the
iterations the run started with and kept by the extension) is re-run as it was made: started
with the record's `training.start_iterations`, then extended in the same folder to its
`iterations`. The comparison:

- bitwise, where the record names this machine, these library versions and this commit: every
  episode of every evaluation must be identical (instruction, seed, success, return, length) and
  the trained weights' sha256 the record's, since training on the CPU with one thread is
  deterministic;
- else within a stated tolerance: per evaluation (and on the ranked target success),
  |claimed - audited| success <= 1.96 * sqrt(2 p (1 - p) / n), p the pooled success rate and n the
  episodes, the 95% bound on the difference of two binomial proportions.

Before any training a record that contradicts itself (`leaderboard.contradictions`: its target
skills and its env's, its seed, learner, curriculum, env or budget and its own config, a curve
going on past mastery with auto_stop on, or its env steps and curve and its budget; the check a
submission passes too) is not reproduced. VLM-driven runs are replayed from their own transcript
(kept beside the record copy by `leaderboard submit` since trust at scale); a run whose board
copy has none is re-run with its backend if that is the offline rules stand-in, and otherwise
cannot be audited, which the output says. The result is appended to the entry's `audits` in
leaderboard.json (when, the sampled runs, each one's outcome, and the entry's verdict with it),
written atomically under the board's lock, and LEADERBOARD.md shows the verdict. Audits
accumulate: a run that failed to reproduce stays on record, and the entry's verdict and its "k
of n" are over every run ever audited (`leaderboard.audit_standing`), so a later audit drawing
other runs, or the same run again, never turns a failure into yes.

The re-runs live in WORK/<entry>/<run>-<key>/, the key a hash of the config, the commit, the
library versions and the machine. Only an unfinished collect re-run there is resumed (an
interrupted audit), and a truncated dataset or checkpoint found in it is reported and the run
re-done (`experimenter.loop`), never trained on; a finished re-run (an earlier audit's) or an
online one is cleared and trained again, which the output says. A re-run that fails here (an
exception, e.g. a full disk or a missing package, as against a result that differs) stops the
audit with RerunFailed naming the run and the cause, and nothing is written to the board, so an
entry keeps its previous audits; WORK and the board are checked to be writable folders before
any training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gameon.atomic import check_writable, file_lock
from gameon.benchmark.leaderboard import (
    BOARD_FILE,
    LOCK_FILE,
    MARKDOWN_FILE,
    REPRODUCED,
    TRANSCRIPT_FILE,
    Board,
    BoardEntry,
    BoardRun,
    EntryAudit,
    RunAudit,
    audit_cell,
    audit_standing,
    audit_verdict,
    check_board_writable,
    contradictions,
    entry_number,
    read_board,
    shown_protocol,
    training_config,
    write_board,
)
from gameon.evaluation import SUITE_SEED
from gameon.integrity import input_file_digests
from gameon.records import RANKED_MODE, Evaluation, RunRecord, load_record
from gameon.text import plural

AUDIT_ROOT = Path("runs") / "audit"
Z95 = 1.96
TOLERANCE_RULE = (
    "|claimed - audited| success <= 1.96 * sqrt(2 p (1 - p) / n) per evaluation and on the target "
    "success, p the pooled success rate and n the episodes (the 95% bound on the difference of "
    "two binomial proportions); bitwise identity where machine, library versions and commit match"
)
PATH_ARGS = ("datasets_path", "run_dir", "init_checkpoint")
"""Learner Args that name the run's own folders, which an audit's re-run differs in."""
AS_BEFORE = {
    "vlm_code_skills": False,
    "vlm_max_cost": None,
    "coded_skills": None,
    "vlm_timeout": None,
    "vlm_retries": None,
    "hand_curriculum": None,
}
"""Config fields added after some records were made, each with the default that does what every
run did before the field existed (its feature off; the fixed 30 s request timeout and 3
retries; the shipped hand stages file), so a record without them ran as the default says; any
other absent field makes a record unauditable."""
ONLY_WITH = {"coded_max_steps": "coded_skills"}
"""Config fields read only when another field turns their feature on: absent, with the feature
off, they changed nothing."""


class NotAuditable(ValueError):
    """A record whose training cannot be re-run here; the message says why."""


class RerunFailed(ValueError):
    """A sampled run's re-run raised here (the operator's side, not the claim's): the audit
    stops and writes nothing; the message names the run and the cause."""


@dataclass
class Plan:
    """How to re-run one record's training."""

    protocol: str
    learner: str
    config: Any
    """a LoopConfig (collect) or the learner's Args (online)"""
    notes: list[str] = field(default_factory=list)
    start_iterations: int | None = None
    """collect: the iterations to start the re-run with before extending it to the config's, as
    the run was made (an extended run whose curriculum reads its budget); None: run the config
    straight through"""


@dataclass
class Rerun:
    """What the re-run training gave: its evaluations, target success and weights."""

    evaluations: dict[str, Evaluation]
    target_success: float
    weights_sha256: str | None
    learner_args: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)


def audit_entry(
    entry_id: str,
    runs: int,
    board_dir: str | Path = Path("results"),
    seed: int = 0,
    work_root: str | Path = AUDIT_ROOT,
    say: Callable[[str], None] = print,
) -> EntryAudit:
    """Audit `runs` sampled runs of an entry, append the audit to the entry's audits on the
    board and return it (its `audited`: the entry's verdict over all its audits); RerunFailed,
    with nothing written, if a re-run fails here; ValueError, before any training, if the board
    or the work folder cannot be written."""
    board_dir, work_root = Path(board_dir), Path(work_root)
    if not (board_dir / BOARD_FILE).is_file():
        raise ValueError(
            f"no leaderboard at {board_dir} (no {BOARD_FILE}); give its folder with --board"
        )
    check_board_writable(board_dir)
    entry = find_entry(read_board(board_dir), entry_id)
    sampled = sample_runs(entry, runs, seed)
    check_work_dir(work_root, work_root / entry.id)
    say(
        f"audit of entry {entry.id} ({shown_protocol(entry.protocol)}, {entry.env_id}, "
        f"{entry.curriculum_label}, {entry.learner}; {plural(len(entry.runs), 'run')}): sampled "
        f"{len(sampled)} with sampling seed {seed}: "
        + ", ".join(f"{run.run_id} (seed {run.seed})" for run in sampled)
    )
    say(f"tolerance where not bitwise: {TOLERANCE_RULE}")
    try:
        results = [audit_run(run, board_dir, work_root / entry.id, say) for run in sampled]
    except RerunFailed as error:
        previous = audit_cell(entry.audits) if entry.audits else "none"
        raise RerunFailed(
            f"{error}; nothing is written to {board_dir / BOARD_FILE}, so entry {entry.id} keeps "
            f"its previous audits ({previous}): remove the cause and run the audit again"
        ) from error.__cause__
    good = sum(result.outcome in REPRODUCED for result in results)
    audit = EntryAudit(
        audited=good == len(results),  # this audit's own; write_audit sets the entry's verdict
        when=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        runs=len(sampled),
        sampling_seed=seed,
        sampled=[run.run_id for run in sampled],
        tolerance=TOLERANCE_RULE,
        results=results,
    )
    written = write_audit(board_dir, entry.id, audit)
    say(f"this audit: {good} of {len(results)} sampled runs reproduced their claim")
    say(
        f"entry {entry.id}: audited {verdict_text(written.audits)}; written to "
        f"{board_dir / BOARD_FILE} and {board_dir / MARKDOWN_FILE}"
    )
    return written.audits[-1]


def verdict_text(audits: list[EntryAudit]) -> str:
    """The entry's verdict over all its audits in words, naming the runs that keep it at no,
    e.g. "no (2 of 3 runs audited so far reproduced their claim; s1: not reproduced)"."""
    standing = audit_standing(audits)
    good = sum(value == "reproduced" for value in standing.values())
    others = "".join(
        f"; {run_id}: {value}" for run_id, value in standing.items() if value != "reproduced"
    )
    return (
        f"{'yes' if audit_verdict(audits) else 'no'} ({good} of "
        f"{plural(len(standing), 'run')} audited so far reproduced their claim{others})"
    )


def find_entry(board: Board, entry_id: str) -> BoardEntry:
    """The entry with this id, or the one whose id starts with it; all digits are an entry's
    number ("7" and "0007" both name 0007-...)."""
    if entry_id.isascii() and entry_id.isdigit():
        matches = [e for e in board.entries if entry_number(e.id) == int(entry_id)]
    else:
        matches = [e for e in board.entries if e.id == entry_id]
        matches = matches or [e for e in board.entries if e.id.startswith(entry_id)]
    if len(matches) == 1:
        return matches[0]
    ids = ", ".join(e.id for e in board.entries) or "none"
    what = "matches several entries" if matches else "is not on the board"
    raise ValueError(f"entry {entry_id!r} {what}; give an entry id (or its number), one of: {ids}")


def sample_runs(entry: BoardEntry, runs: int, seed: int) -> list[BoardRun]:
    """`runs` of the entry's runs drawn without replacement by random.Random(seed), by seed."""
    if not 1 <= runs <= len(entry.runs):
        raise ValueError(
            f"--runs must be between 1 and {len(entry.runs)} (entry {entry.id} has "
            f"{plural(len(entry.runs), 'run')}), got {runs}"
        )
    chosen = random.Random(seed).sample(range(len(entry.runs)), runs)
    return sorted((entry.runs[i] for i in chosen), key=lambda run: run.seed)


def check_work_dir(work_root: Path, work_dir: Path) -> None:
    """Make the folder the re-runs train in and write a file there, so that an unusable --work
    is refused (ValueError) before any training."""
    try:
        check_writable(work_dir)
    except OSError as error:
        raise ValueError(
            f"--work {work_root} cannot hold the re-runs: {work_dir}: {type(error).__name__}: "
            f"{error.strerror or error}; give a folder that exists or can be created, and that "
            "can be written to"
        ) from None


def audit_run(
    run: BoardRun, board_dir: Path, work_dir: Path, say: Callable[[str], None] = print
) -> RunAudit:
    """Re-run one run's training from its record copy and compare the evaluation with the claim."""
    say(f"run {run.run_id} (seed {run.seed}):")
    try:
        record = load_record(board_dir / run.record)
        plan = plan_rerun(record, (board_dir / run.record).parent)
    except ValueError as error:
        say(f"  not audited: {error}")
        return RunAudit(run_id=run.run_id, seed=run.seed, outcome="not audited", detail=str(error))
    for note in plan.notes:
        say(f"  {note}")
    problems = contradictions(record)
    if problems:
        detail = "; ".join(problems)
        say(f"  not reproduced: {detail}")
        return RunAudit(run_id=run.run_id, seed=run.seed, outcome="not reproduced", detail=detail)
    comparison, reasons = comparison_mode(record)
    if reasons:
        say(f"  comparison: tolerance, since {'; '.join(reasons)}")
    else:
        say("  comparison: bitwise (same machine, library versions and commit as the record)")
    folder = work_dir / f"{_safe(run.run_id)}-{rerun_key(plan.config)}"
    say(f"  re-training ({plan.protocol}, {plan.learner}) in {folder}")
    start = time.perf_counter()
    try:
        note = prepare_folder(plan, folder)
        if note:
            say(f"  {note}")
        rerun = run_training(plan, folder)
    except Exception as error:
        cause = f"{type(error).__name__}: {error}"
        say(f"  -> the re-run failed: {cause}")
        raise RerunFailed(
            f"the audit stopped: run {run.run_id} (seed {run.seed}) failed to re-run in "
            f"{folder}: {cause}"
        ) from error
    for note in rerun.notes:
        say(f"  {note}")
    result = compare(record, rerun, comparison)
    result.detail += f" (re-run in {time.perf_counter() - start:.0f} s, {folder})"
    for key, claimed in result.claimed.items():
        bound = f", bound {result.bounds[key]:.3f}" if key in result.bounds else ""
        say(f"  {key}: claimed {claimed:.3f}, audited {result.audited[key]:.3f}{bound}")
    say(f"  -> {result.outcome}: {result.detail}")
    return result


def plan_rerun(record: RunRecord, record_dir: Path) -> Plan:
    """The config to re-run a record's training with; NotAuditable says what is missing."""
    found = training_config(record)
    if found is None:
        raise NotAuditable(
            f"the record holds no training config (an {record.protocol} record made before "
            "training.config was kept has only its settings), so its learner Args cannot be "
            "rebuilt in full"
        )
    raw, source = found
    if record.protocol == "collect":
        from gameon.experimenter.loop import LoopConfig

        cls: type = LoopConfig
    else:
        cls = importlib.import_module(f"gameon.baselines.{record.learner}").Args
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise NotAuditable(
            f"{source} has fields {unknown} that this version's {cls.__name__} does not know; "
            f"audit it at the record's commit {record.git_commit}"
        )
    notes = [f"rebuilt from the record's {source} ({cls.__module__}.{cls.__name__})"]
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    absent = [name for name in names if name not in raw]
    unsafe = [
        name
        for name in absent
        if not (name in AS_BEFORE and defaults[name] == AS_BEFORE[name])
        and not (name in ONLY_WITH and raw.get(ONLY_WITH[name]) is None)
    ]
    if unsafe:
        raise NotAuditable(
            f"{source} lacks {', '.join(unsafe)} (made at commit {record.git_commit}, before "
            f"they existed), whose defaults here may not be what ran; audit it at that commit"
        )
    if absent:
        notes.append(
            f"absent from the record, so run with their defaults, which do what runs did before "
            f"them: {', '.join(absent)}"
        )
    _check_input_files(record)
    if isinstance(raw.get("hidden"), list):
        raw["hidden"] = tuple(raw["hidden"])
    config = cls(**raw)
    if raw.get("curriculum") == "vlm":
        config = _vlm_rerun(record, record_dir, config, notes)
    try:
        if record.protocol == "collect":
            config.validate()
        else:
            from gameon.baselines.common import check_online_args

            check_online_args(config)
    except ValueError as error:
        raise NotAuditable(
            f"this version refuses the record's config ({error}); audit it at the record's "
            f"commit {record.git_commit}"
        ) from None
    start = _start_iterations(record, config, notes)
    return Plan(record.protocol, record.learner, config, notes, start)


def _check_input_files(record: RunRecord) -> None:
    """NotAuditable where a file the run read by path (stages, coded skills, a transcript) reads
    otherwise here: a re-run would train on other inputs and be judged not to reproduce."""
    recorded = record.training.input_files if record.training else {}
    here = input_file_digests(recorded)
    for path, digest in recorded.items():
        if here[path] != digest:
            state = "is missing" if here[path] is None else "holds other contents"
            raise NotAuditable(
                f"the run read {path} (sha256 {str(digest)[:12]}...), which here ({Path.cwd()}) "
                f"{state}: audit from the folder the run was made in, or put that file there"
            )


def _start_iterations(record: RunRecord, config: Any, notes: list[str]) -> int | None:
    """The iterations to start a collect re-run with before extending it (None: run the config
    straight): those the run started with, where it was extended since and its curriculum read
    the budget they gave (hand's windows), which the extension kept. Other curricula decide the
    same whatever the budget, so their extended runs re-run straight through."""
    from gameon.experimenter.curricula import curriculum_class

    start = record.training.start_iterations if record.training else None
    if record.protocol != "collect" or start is None or start >= config.iterations:
        return None
    if not curriculum_class(config.curriculum).reads_budget:
        return None
    notes.append(
        f"started with iterations {start} and extended to {config.iterations}; the "
        f"{config.curriculum} curriculum keeps the budget it started with, so the re-run starts "
        f"with iterations {start} and is then extended in the same folder, as the run was"
    )
    return start


def _vlm_rerun(record: RunRecord, record_dir: Path, config: Any, notes: list[str]) -> Any:
    """A vlm run's config that replays its own transcript (kept beside the record copy as
    transcript.jsonl, whatever the run folder named it), else reruns the offline rules."""
    transcript = record_dir / TRANSCRIPT_FILE
    if transcript.is_file():
        notes.append(
            f"VLM ({config.vlm_backend}): replayed from the run's own transcript {transcript}"
        )
        return dataclasses.replace(
            config,
            vlm_backend="replay",
            vlm_replay=str(transcript),
            vlm_model=None,
            vlm_base_url=None,
            vlm_timeout=None,
            vlm_retries=None,
        )
    missing = (
        f"the board keeps no VLM transcript of this run ({transcript} is missing: entries "
        "submitted before transcripts were kept beside the records have none)"
    )
    if config.vlm_backend == "rules":
        notes.append(
            f"VLM (rules): {missing}; its backend is the offline rules stand-in, deterministic, "
            "so the audit runs it again instead of replaying"
        )
        return config
    raise NotAuditable(
        f"{missing}, and its backend {config.vlm_backend!r} cannot be re-run offline without one"
    )


def comparison_mode(record: RunRecord) -> tuple[str, list[str]]:
    """bitwise where the record names this machine, these versions and this commit; else
    tolerance, with the reasons."""
    from gameon.integrity import git_commit, platform_info, versions

    reasons = []
    here = platform_info()
    if record.platform is None:
        reasons.append("the record does not name its machine (made before it was kept)")
    elif record.platform != here:
        differ = [
            k for k in sorted({*here, *record.platform}) if here.get(k) != record.platform.get(k)
        ]
        reasons.append(
            "another machine ("
            + ", ".join(f"{k} {record.platform.get(k)!r} vs {here.get(k)!r} here" for k in differ)
            + ")"
        )
    mine = versions()
    for package in sorted({*mine, *record.versions}):
        if mine.get(package) != record.versions.get(package):
            reasons.append(
                f"{package} {record.versions.get(package)} in the record, {mine.get(package)} here"
            )
    setups = record.extra.get("setups", [])
    if len(setups) > 1:
        reasons.append(
            f"the run was resumed under {len(setups) - 1} other setup(s) (commit, versions or "
            "machine) than it started with, and the record names only the last"
        )
    commit = git_commit()
    if record.git_commit != commit:
        claimed, here_commit = (record.git_commit or "none")[:7], (commit or "none")[:7]
        reasons.append(f"commit {claimed} in the record, {here_commit} here")
    return ("tolerance" if reasons else "bitwise"), reasons


def prepare_folder(plan: Plan, folder: Path) -> str | None:
    """Keep an unfinished collect re-run to resume (an interrupted audit); clear a finished one
    (an earlier audit's) or an online one, so the run is trained again. Says which."""
    if not folder.is_dir():
        return None
    if plan.protocol == "collect" and not _collect_finished(plan.config, folder):
        return (
            "resuming the re-run there, which an earlier audit did not finish (an unreadable "
            "state in it is reported by the re-run)"
        )
    held = "a finished re-run" if plan.protocol == "collect" else "an online re-run"
    shutil.rmtree(folder)
    return f"the folder held {held} of an earlier audit: cleared, so the run is trained again"


def _collect_finished(config: Any, folder: Path) -> bool:
    """Whether a collect run folder's committed state is the end of the run, its targets
    evaluated (an unreadable state is left to `run_experiment`, which reports it)."""
    from gameon.experimenter.loop import finished, load_state

    try:
        state = load_state(folder, config)
    except ValueError:  # UnicodeDecodeError included
        return False
    return state is not None and finished(config, state) and state.targets is not None


def run_training(plan: Plan, folder: Path) -> Rerun:
    """Train as the record's config says, on the CPU with one thread; return the evaluations."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if plan.protocol == "collect":
            return _rerun_collect(plan, folder)
        return _rerun_online(plan, folder)
    finally:
        torch.set_num_threads(threads)


def _rerun_collect(plan: Plan, folder: Path) -> Rerun:
    """Run the collect loop as the record's run was made: straight through, or started with
    `plan.start_iterations` and then extended (the first part skipped where an interrupted
    audit's re-run got past it)."""
    from gameon.experimenter.loop import load_state, run_experiment

    if plan.start_iterations is not None:
        try:
            state = load_state(folder, plan.config)
        except ValueError:  # unreadable: the first run_experiment reports it and re-does the run
            state = None
        if state is None or state.iteration < plan.start_iterations:
            start = dataclasses.replace(plan.config, iterations=plan.start_iterations)
            run_experiment(start, folder, progress=False)
    record = run_experiment(plan.config, folder, progress=False)
    bad = [f for report in record.extra.get("bad_files", []) for f in report["files"]]
    notes = []
    if bad:
        found = "; ".join(f"{f['path']}: {f['problem']}" for f in bad)
        notes.append(f"bad files in the audit's run folder, reported and the run re-done: {found}")
    return Rerun(
        evaluations=evaluations_of(record),
        target_success=record.target_success,
        weights_sha256=record.weights_sha256,
        learner_args=record.training.learner_args if record.training else None,
        notes=notes,
    )


def _rerun_online(plan: Plan, folder: Path) -> Rerun:
    from gameon.envs import ENV_SKILLS
    from gameon.integrity import weights_sha256

    learner = importlib.import_module(f"gameon.baselines.{plan.learner}")
    args = dataclasses.replace(plan.config, run_dir=str(folder))
    summary = learner.train(args)
    episodes = summary["eval"]["episodes"]
    evaluation = Evaluation(
        env_id=args.env_id,
        suite_seed=SUITE_SEED,
        episodes_per_skill=args.eval_episodes_per_skill,
        episodes=episodes,
    )
    targets = ENV_SKILLS[args.env_id][0]
    return Rerun(
        evaluations={f"final {args.env_id}": evaluation},
        target_success=evaluation.success_rate(tuple(targets)),
        weights_sha256=weights_sha256(summary["checkpoint"]),
        learner_args=None,
    )


def evaluations_of(record: RunRecord) -> dict[str, Evaluation]:
    """A record's evaluations by name: "final ENV", then "MODE ENV" of each target evaluation."""
    evaluations = {f"final {record.evaluation.env_id}": record.evaluation}
    for target in record.target_evaluations:
        evaluations[f"{target.mode} {target.evaluation.env_id}"] = target.evaluation
    return evaluations


def binomial_bound(claimed: float, audited: float, episodes: int) -> float:
    """The 95% bound on the difference of two success rates of `episodes` episodes each."""
    pooled = (claimed + audited) / 2
    return Z95 * math.sqrt(2 * pooled * (1 - pooled) / episodes)


def compare(record: RunRecord, rerun: Rerun, comparison: str) -> RunAudit:
    """The audit of one run: its claimed evaluations against the re-run's."""
    claimed_evaluations = evaluations_of(record)
    missing = sorted(set(claimed_evaluations) - set(rerun.evaluations))
    if missing:
        return RunAudit(
            run_id=record.run_id,
            seed=record.seed,
            outcome="not reproduced",
            comparison=comparison,
            detail=f"the re-run has no {', '.join(missing)} evaluation",
        )
    claimed, audited, bounds, differing, total = {}, {}, {}, 0, 0
    for key, evaluation in claimed_evaluations.items():
        again = rerun.evaluations[key]
        claimed[key] = evaluation.success_rate()
        audited[key] = again.success_rate()
        bounds[key] = binomial_bound(claimed[key], audited[key], len(evaluation.episodes))
        differing += _differing(evaluation, again)
        total += len(evaluation.episodes)
    ranked = record.target_evaluation(RANKED_MODE) or record.evaluation
    targets = sum(e.skill in record.target_skills for e in ranked.episodes)
    claimed["target success"] = record.target_success
    audited["target success"] = rerun.target_success
    bounds["target success"] = binomial_bound(
        record.target_success, rerun.target_success, max(targets, 1)
    )
    weights = _weights_note(record.weights_sha256, rerun.weights_sha256)
    identical = differing == 0 and "differ" not in weights
    within = all(abs(claimed[k] - audited[k]) <= bounds[k] + 1e-12 for k in claimed)
    args_note = _learner_args_note(record, rerun)
    if identical:
        outcome = "reproduced"
        detail = f"every one of {total} episodes identical{weights}{args_note}"
    elif comparison == "bitwise":
        outcome = "not reproduced"
        detail = (
            f"{differing} of {total} episodes differ{weights} where the comparison is bitwise"
            f"{args_note}"
        )
    else:
        outcome = "within tolerance" if within else "not reproduced"
        outside = [k for k in claimed if abs(claimed[k] - audited[k]) > bounds[k] + 1e-12]
        detail = f"{differing} of {total} episodes differ{weights}" + (
            "; every success rate within its bound"
            if within
            else f"; outside the bound: {', '.join(outside)}"
        )
        detail += args_note
    if comparison == "bitwise":
        bounds = {}
    return RunAudit(
        run_id=record.run_id,
        seed=record.seed,
        outcome=outcome,
        comparison=comparison,
        claimed=claimed,
        audited=audited,
        bounds=bounds,
        differing_episodes=differing,
        detail=detail,
    )


def _differing(claimed: Evaluation, audited: Evaluation) -> int:
    """Episodes that differ in (instruction, seed, success, return, length), or are missing."""
    keys = [
        [(e.instruction, e.seed, e.success, e.episode_return, e.length) for e in ev.episodes]
        for ev in (claimed, audited)
    ]
    pairs = zip(keys[0], keys[1], strict=False)
    return sum(a != b for a, b in pairs) + abs(len(keys[0]) - len(keys[1]))


def _weights_note(claimed: str | None, audited: str | None) -> str:
    if claimed is None or audited is None:
        return "; the record carries no weights hash to compare"
    if claimed == audited:
        return "; the trained weights are identical (weights_sha256)"
    return (
        f"; the trained weights differ (weights_sha256 {audited[:12]}..., "
        f"claimed {claimed[:12]}...)"
    )


def _learner_args_note(record: RunRecord, rerun: Rerun) -> str:
    """Where the learner Args the re-run used differ from the record's (paths aside)."""
    claimed = record.training.learner_args if record.training else None
    if claimed is None or rerun.learner_args is None:
        return ""
    differ = [
        f"{key} {claimed.get(key)!r} vs {rerun.learner_args.get(key)!r}"
        for key in sorted({*claimed, *rerun.learner_args})
        if key not in PATH_ARGS and claimed.get(key) != rerun.learner_args.get(key)
    ]
    return f"; learner Args differ from the record's: {', '.join(differ)}" if differ else ""


def write_audit(board_dir: Path, entry_id: str, audit: EntryAudit) -> BoardEntry:
    """Append the audit to the entry's audits, its `audited` set to the entry's verdict over all
    of them as the board holds them now, and rewrite leaderboard.json and LEADERBOARD.md
    atomically under the board's lock; the entry as written."""
    with file_lock(board_dir / LOCK_FILE):
        board = read_board(board_dir)
        entry = next((entry for entry in board.entries if entry.id == entry_id), None)
        if entry is None:
            raise ValueError(f"entry {entry_id} left the board during the audit; nothing written")
        audits = [*entry.audits, audit]
        audits[-1] = audit.model_copy(update={"audited": audit_verdict(audits)})
        written = entry.model_copy(update={"audits": audits})
        entries = [written if e.id == entry_id else e for e in board.entries]
        write_board(board_dir, Board(entries=entries, next_number=board.next_number))
    return written


def rerun_key(config: Any) -> str:
    """A hash of the config and of what else the training depends on (commit, library versions,
    machine): a re-run is resumed only by an audit of the same setup."""
    from gameon.integrity import git_commit, platform_info, versions

    setup = {
        "config": dataclasses.asdict(config),
        "commit": git_commit(),
        "versions": versions(),
        "platform": platform_info(),
    }
    text = json.dumps(setup, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:80] or "run"
