"""The benchmark report: every run record of a results directory aggregated per (protocol,
curriculum label, learner, env), as a Markdown table, a JSON summary and PNG plots.

Every number is recomputed from the records' per-episode evaluation outcomes (gameon.records)
and aggregated over seeds with the statistics of benchmark.stats: the interquartile mean with a
95% stratified-bootstrap interval, the probability of improvement over the `fixed` curriculum of
the same protocol, learner and env, and the diversity of the data a collect run practised. A
record that is missing or invalid, or a copy of a run already counted, is listed as skipped with
the reason; it never stops the report.
"""

from __future__ import annotations

import io
import json
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from gameon.atomic import atomic_write, defer_signals
from gameon.benchmark.runner import MATRIX_FILE
from gameon.benchmark.runs import ERROR_FILE, failure_reason, was_interrupted
from gameon.benchmark.stats import (
    EPISODES_ALPHA,
    MIN_RUNS_FOR_INTERVAL,
    Estimate,
    episodes_p,
    iqm,
    iqm_ci,
    normalised_entropy,
    probability_of_improvement,
)
from gameon.envs.language import COLOURS, SKILLS
from gameon.records import RECORD_FILE, RunRecord, load_record

REPORT_FORMAT = "gameon-report-v1"
REPORT_JSON = "report.json"
BASELINE = "fixed"
"""The curriculum every other one is compared with (probability of improvement)."""
POSITIVE, NEGATIVE = "positive_control", "negative_control"
"""The controls whose separation the report checks (see `controls_check`)."""
SCENE_COLOURS = COLOURS[:3]
"""The default scene's blocks: the object categories of the diversity entropy (plus any other
colour a record names)."""
CURVE_RESAMPLES = 500
CURVE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
CURVE_LINES = ("-", "--", "-.", ":")
"""Each curriculum's marker and line style on the curves plot (cycled), so equal curves differ."""

GroupKey = tuple[str, str, str, str]
"""(protocol, curriculum_label, learner, env_id)"""


@dataclass(frozen=True)
class Skipped:
    """A run folder whose record could not be used, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class ReportPaths:
    """Where write_report put its outputs."""

    markdown: Path
    json: Path
    plots: list[Path] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    """run folders whose record could not be used (also listed in the report)"""
    missing: list[str] = field(default_factory=list)
    """the matrix's runs without a valid record (also said in the report)"""


def protocol_name(record: RunRecord) -> str:
    """The protocol as reports name it: "online", "collect" (v1) or, for collect v2, with its
    collector: "collect v2 (demo)" (collectors give different data, so they are not compared)."""
    if record.protocol_version != 2:
        return record.protocol
    collector = record.extra.get("config", {}).get("collector")
    return f"{record.protocol} v2 ({collector})" if collector else f"{record.protocol} v2"


def group_key(record: RunRecord) -> GroupKey:
    """The group a record is aggregated in."""
    return (protocol_name(record), record.curriculum_label, record.learner, record.env_id)


def load_runs(results_dir: str | Path) -> tuple[list[RunRecord], list[Skipped]]:
    """The valid records of every <results_dir>/*/record.json, each run once and each seed once
    per group, and the folders skipped, why (a copy of a run already counted, or another run of
    a seed its group already has, e.g. `gameon experiment` run again by hand into the folder: one
    seed is one sample, however many times it ran)."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ValueError(f"{results_dir} is not a directory of run folders")
    loaded, skipped = [], []
    for folder in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        if folder.name.startswith("."):
            continue
        if not (folder / RECORD_FILE).is_file():
            if not (folder / REPORT_JSON).is_file():  # a report written there with --out: no run
                skipped.append(Skipped(str(folder), _why_no_record(folder)))
            continue
        try:
            loaded.append((folder, load_record(folder / RECORD_FILE)))
        except ValueError as error:
            skipped.append(Skipped(str(folder), str(error)))
    planned = set(planned_run_ids(read_matrix(results_dir)))

    def order(item: tuple[Path, RunRecord]) -> tuple[bool, bool]:
        """The folder named after its run first, and the matrix's own runs before others."""
        folder, record = item
        return folder.name != record.run_id, record.run_id not in planned

    records: list[RunRecord] = []
    counted: dict[str, Path] = {}
    seeds: dict[tuple[GroupKey, int], tuple[Path, RunRecord]] = {}
    for folder, record in sorted(loaded, key=order):
        first = counted.setdefault(record.run_id, folder)
        if first != folder:
            reason = f"same run as {first} (run id {record.run_id}): counted once"
            skipped.append(Skipped(str(folder), reason))
            continue
        key = (group_key(record), record.seed)
        if key in seeds:
            first, kept = seeds[key]
            same = " with the same weights" if kept.weights_sha256 == record.weights_sha256 else ""
            protocol, label, learner, env_id = key[0]
            reason = (
                f"seed {record.seed} of {label} ({protocol}, {learner}, {env_id}) again{same}, "
                f"after {first}: each seed is counted once"
            )
            skipped.append(Skipped(str(folder), reason))
            continue
        seeds[key] = (folder, record)
        records.append(record)
    return records, sorted(skipped, key=lambda s: s.path)


def _why_no_record(folder: Path) -> str:
    """Why a folder holds no record: interrupted or failed, with the reason its error.txt gives,
    else unfinished or not a run."""
    error_file = folder / ERROR_FILE
    if error_file.is_file():
        text = error_file.read_text(errors="replace")
        if was_interrupted(text):
            return (
                "interrupted (Ctrl-C, or its bench run was stopped) before its record was written; "
                f"the same `gameon bench run` runs it again (see {error_file})"
            )
        return f"failed: {failure_reason(text)} (see {error_file})"
    return f"no {RECORD_FILE} (unfinished or not a run)"


def group_records(records: Iterable[RunRecord]) -> dict[GroupKey, list[RunRecord]]:
    """Records per group, groups sorted, runs in each sorted by seed then run id."""
    groups: dict[GroupKey, list[RunRecord]] = {}
    for record in records:
        groups.setdefault(group_key(record), []).append(record)
    return {key: sorted(groups[key], key=lambda r: (r.seed, r.run_id)) for key in sorted(groups)}


def target_success(records: Sequence[RunRecord]) -> list[float]:
    """Each run's final success on its target skills, recomputed from its episodes (collect v2:
    the composed policy on the target env's suite, see `RunRecord.target_success`)."""
    return [record.target_success for record in records]


def target_evaluations(records: Sequence[RunRecord]) -> list[dict]:
    """Per (env, mode) that every run evaluated at the end (collect v2): IQM with 95% CI, mean,
    per-run success over that env's skills and the episodes per skill."""
    keys = [(t.evaluation.env_id, t.mode) for t in records[0].target_evaluations]
    rows = []
    for env_id, mode in keys:
        evaluations = [r.target_evaluation(mode, env_id) for r in records]
        if any(e is None for e in evaluations):
            continue
        scores = [e.success_rate() for e in evaluations]
        rows.append(
            {
                "env_id": env_id,
                "mode": mode,
                "success": iqm_ci([scores]).to_dict(),
                "mean": float(np.mean(scores)),
                "per_run": scores,
                "episodes_per_skill": sorted({e.episodes_per_skill for e in evaluations}),
            }
        )
    return rows


def per_skill_iqm(records: Sequence[RunRecord]) -> dict[str, float]:
    """IQM over runs of each skill's final success rate (0 for a run without that skill)."""
    rates = [record.evaluation.per_skill() for record in records]
    skills = dict.fromkeys(skill for run in rates for skill in run)
    return {skill: iqm([run.get(skill, 0.0) for run in rates]) for skill in skills}


def summarise_group(
    records: Sequence[RunRecord], baseline: Sequence[RunRecord] | None = None
) -> dict:
    """The aggregates of one group's runs (and, given the baseline group's runs, P(> baseline))."""
    first = records[0]
    scores = target_success(records)
    per_skill = per_skill_iqm(records)
    suite_scores = [r.evaluation.success_rate() for r in records]
    episodes = [r.target_episodes for r in records]
    improvement = suite_improvement = None
    if baseline:
        improvement = probability_of_improvement([scores], [target_success(baseline)]).to_dict()
        suite_baseline = [r.evaluation.success_rate() for r in baseline]
        suite_improvement = probability_of_improvement([suite_scores], [suite_baseline]).to_dict()
    return {
        "protocol": protocol_name(first),
        "curriculum": first.curriculum,
        "curriculum_label": first.curriculum_label,
        "learner": first.learner,
        "env_id": first.env_id,
        "target_skills": first.target_skills,
        "runs": [r.run_id for r in records],
        "seeds": [r.seed for r in records],
        "target_success": iqm_ci([scores]).to_dict(),
        "target_success_mean": float(np.mean(scores)),
        "target_success_per_run": scores,
        "target_episodes": [sum(wins for wins, _ in episodes), sum(n for _, n in episodes)],
        "suite_success": iqm_ci([suite_scores]).to_dict(),
        "suite_success_per_run": suite_scores,
        "per_skill_iqm": per_skill,
        "target_evaluations": target_evaluations(records),
        "practised": practised(records),
        "improvement_over_fixed": improvement,
        "suite_improvement_over_fixed": suite_improvement,
        "diversity": diversity(records),
        "vlm": vlm_usage(records),
        "wall_seconds_mean": float(np.mean([r.wall_seconds for r in records])),
        "steps_per_second_mean": float(np.mean([wall_rate(r) for r in records])),
        "env_steps_mean": float(np.mean([r.env_steps for r in records])),
        "budgets": sorted({budget_text(r.budget) for r in records}),
        "curve_unit": first.curve_unit,
        "evaluation": {
            "env_id": first.evaluation.env_id,
            "episodes_per_skill": sorted({r.evaluation.episodes_per_skill for r in records}),
        },
    }


def budget_text(budget: dict[str, Any]) -> str:
    """A run's budget in a few words: "5 x 32 tasks, 150 seed episodes, 4000 updates" (collect:
    iterations x tasks each, updates per iteration), "300000 env steps" (online), else its
    fields."""
    collect = ("iterations", "episodes_per_iteration", "seed_episodes", "num_updates")
    if all(key in budget for key in collect):
        iterations, tasks, seed_episodes, updates = (budget[key] for key in collect)
        return f"{iterations} x {tasks} tasks, {seed_episodes} seed episodes, {updates} updates"
    if "total_timesteps" in budget:
        return f"{budget['total_timesteps']} env steps"
    return ", ".join(f"{key} {value}" for key, value in sorted(budget.items()))


def wall_rate(record: RunRecord) -> float:
    """Env steps per second of the run's wall time, one definition for both protocols (an online
    record's own `steps_per_second` leaves out its evaluations)."""
    return record.env_steps / record.wall_seconds if record.wall_seconds else 0.0


def diversity(records: Sequence[RunRecord]) -> dict | None:
    """Mean normalised entropy over skills (of all SKILLS) and over objects of the collected
    data; None when no run collected any."""
    collected = [r.collected for r in records if r.collected is not None]
    if not collected:
        return None
    skills = [normalised_entropy(c.skills, SKILLS) for c in collected]
    objects = [
        normalised_entropy(c.objects, list(dict.fromkeys([*SCENE_COLOURS, *c.objects])))
        for c in collected
    ]
    return {
        "skills_entropy": float(np.mean(skills)),
        "objects_entropy": float(np.mean(objects)),
        "episodes_mean": float(np.mean([c.episodes for c in collected])),
    }


def practised(records: Sequence[RunRecord]) -> list[dict[str, float]] | None:
    """Mean share of each skill among the tasks a collect run's curriculum chose, per iteration
    (iteration 0, the uniform seed data, excluded), over the runs that reached it (a run that
    stopped early, its target mastered, counts up to its last); None for runs that do not record
    it."""
    histories = [r.extra.get("iterations") for r in records]
    if not all(h and all("practised" in it for it in h) for h in histories):
        return None
    shares = []
    for index in range(1, max(len(h) for h in histories)):
        per_run = []
        for history in histories:
            if index >= len(history):
                continue
            counts = history[index]["practised"]
            total = sum(counts.values()) or 1
            per_run.append({skill: counts.get(skill, 0) / total for skill in SKILLS})
        shares.append({skill: float(np.mean([run[skill] for run in per_run])) for skill in SKILLS})
    return shares


def above(estimate: dict, other: dict) -> bool:
    """Whether `estimate`'s 95% interval lies wholly above `other`'s."""
    return estimate["low"] > other["high"]


def beats(group: dict, other: dict) -> bool:
    """The report's one rule for calling a difference on the target (the controls separated, a
    curriculum better or worse than fixed): `group`'s 95% interval lies wholly above `other`'s
    and its pooled target episodes succeed more often than chance would give (`episodes_p` below
    EPISODES_ALPHA): seeds that all scored alike have intervals of width 0, which alone would call
    3 of 60 episodes against 0 of 60 a difference."""
    return above(group["target_success"], other["target_success"]) and (
        target_episodes_p(group, other) < EPISODES_ALPHA
    )


def target_episodes_p(group: dict, other: dict) -> float:
    """`episodes_p` of two groups' pooled target episodes."""
    return episodes_p(*group["target_episodes"], *other["target_episodes"])


def chance_note(group: dict, other: dict) -> str:
    """Why intervals that do not overlap are not called a difference, or "" when they are not
    that case."""
    if not above(group["target_success"], other["target_success"]):
        return ""
    p_value = target_episodes_p(group, other)
    if p_value < EPISODES_ALPHA:
        return ""
    (wins, episodes), (other_wins, other_episodes) = (
        group["target_episodes"],
        other["target_episodes"],
    )
    return (
        f"the intervals do not overlap, but {wins} of {episodes} target episodes against "
        f"{other_wins} of {other_episodes} could be chance: Fisher's exact p = {p_value:.2f}"
    )


def controls_check(groups: Sequence[dict]) -> list[dict]:
    """Whether the positive control beats the negative one on the target with 95% intervals
    that do not overlap, per (protocol, learner, env) that ran both: the harness's own proof
    that it can tell a good curriculum from a bad one. `separated` is None (not judged) when
    either side has fewer than MIN_RUNS_FOR_INTERVAL seeds, whose intervals say nothing."""
    by_key: dict[tuple[str, str, str], dict[str, dict]] = {}
    for group in groups:
        key = (group["protocol"], group["learner"], group["env_id"])
        by_key.setdefault(key, {})[group["curriculum"]] = group
    checks = []
    for (protocol, learner, env_id), found in by_key.items():
        positive, negative = found.get(POSITIVE), found.get(NEGATIVE)
        if positive is None or negative is None:
            continue
        runs = min(len(positive["seeds"]), len(negative["seeds"]))
        judged = runs >= MIN_RUNS_FOR_INTERVAL
        checks.append(
            {
                "protocol": protocol,
                "learner": learner,
                "env_id": env_id,
                "positive": positive["target_success"],
                "negative": negative["target_success"],
                "runs": runs,
                "separated": beats(positive, negative) if judged else None,
                "reversed": beats(negative, positive) if judged else None,
                "chance": chance_note(positive, negative) or chance_note(negative, positive),
            }
        )
    return checks


def unused_model(record: RunRecord) -> str | None:
    """Why none of a vlm run's practice was its model's choice (no call answered, or no answer
    valid, so every choice was the learning-progress fallback's), or None."""
    if record.curriculum != "vlm":
        return None
    if record.vlm.calls == 0:
        return "the model answered none of the run's calls"
    if record.vlm.used_answers == 0:
        return f"none of the model's {record.vlm.calls} answers was valid"
    return None


def vlm_usage(records: Sequence[RunRecord]) -> dict:
    """VLM calls, tokens, cost and fallbacks (those the spending cap stopped too): totals over
    the runs and means per run, and how many runs hit their cap."""
    fields = ("calls", "prompt_tokens", "completion_tokens", "cost_usd", "fallbacks")
    fields += ("capped_calls",)
    totals = {name: sum(getattr(r.vlm, name) for r in records) for name in fields}
    backends = sorted({r.vlm.backend for r in records if r.vlm.backend})
    partly = [
        r for r in records if r.vlm.fallbacks > r.vlm.capped_calls and unused_model(r) is None
    ]
    return {
        "backends": backends,
        "capped_runs": sum(r.vlm.capped_calls > 0 for r in records),
        "unanswered_runs": sum(unused_model(r) is not None for r in records),
        "fallback_runs": len(partly),
        "fallbacks_of_answered_runs": sum(r.vlm.fallbacks - r.vlm.capped_calls for r in partly),
        "total": totals,
        "per_run": {name: value / len(records) for name, value in totals.items()},
    }


def summarise(records: Sequence[RunRecord]) -> list[dict]:
    """One summary per group, each non-baseline group compared with the baseline's runs."""
    groups = group_records(records)
    summaries = []
    for key, runs in groups.items():
        protocol, label, learner, env_id = key
        baseline = None
        if runs[0].curriculum != BASELINE:
            baseline = _baseline_runs(groups, protocol, learner, env_id)
        summaries.append(summarise_group(runs, baseline))
    return summaries


def _baseline_runs(
    groups: dict[GroupKey, list[RunRecord]], protocol: str, learner: str, env_id: str
) -> list[RunRecord] | None:
    for key, runs in groups.items():
        if (key[0], key[2], key[3]) == (protocol, learner, env_id) and runs[
            0
        ].curriculum == BASELINE:
            return runs
    return None


def across_envs(records: Sequence[RunRecord]) -> list[dict]:
    """Per (protocol, curriculum label, learner) over two or more envs: the IQM with envs as
    bootstrap strata, and P(> fixed) averaged over the envs both were run on."""
    by_key: dict[tuple[str, str, str], dict[str, list[RunRecord]]] = {}
    for (protocol, label, learner, env_id), runs in group_records(records).items():
        by_key.setdefault((protocol, label, learner), {})[env_id] = runs
    rows = []
    for (protocol, label, learner), envs in by_key.items():
        if len(envs) < 2:
            continue
        fixed = by_key.get((protocol, BASELINE, learner), {})
        shared = [env for env in envs if env in fixed]
        improvement = None
        if label != BASELINE and shared:
            improvement = probability_of_improvement(
                [target_success(envs[e]) for e in shared],
                [target_success(fixed[e]) for e in shared],
            ).to_dict()
        rows.append(
            {
                "protocol": protocol,
                "curriculum_label": label,
                "learner": learner,
                "envs": sorted(envs),
                "target_success": iqm_ci([target_success(r) for r in envs.values()]).to_dict(),
                "improvement_over_fixed": improvement,
                "improvement_envs": shared,
            }
        )
    return rows


def write_report(results_dir: str | Path, out_dir: str | Path | None = None) -> ReportPaths:
    """Aggregate every run record under results_dir; write report.md, report.json and plots into
    out_dir (default results_dir), Ctrl-C held back between report.json and report.md so that
    the two always describe one report. ValueError, with nothing written, if there is nothing to
    report or out_dir is a file or cannot be created."""
    results_dir = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else results_dir
    if out.exists() and not out.is_dir():
        raise ValueError(
            f"cannot write the report into {out}: it is a file; give a folder (created if missing)"
        )
    records, skipped = load_runs(results_dir)
    if not records:
        raise ValueError(no_records_message(results_dir, skipped))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(
            f"cannot write the report into {out}: {error.strerror or error}; give a folder you "
            "can write to (created if missing)"
        ) from None
    groups = summarise(records)
    overall = across_envs(records)
    earlier = earlier_plots(out)
    plots = write_plots(records, out)
    matrix = read_matrix(results_dir)
    summary = {
        "format": REPORT_FORMAT,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "results_dir": str(results_dir),
        "matrix": matrix_heading(matrix),
        "records": len(records),
        "missing_runs": missing_runs(matrix, records),
        "groups": groups,
        "controls": controls_check(groups),
        "across_envs": overall,
        "skipped": [{"path": s.path, "reason": s.reason} for s in skipped],
        "plots": [p.name for p in plots],
        "method": METHOD,
    }
    markdown = render_markdown(summary)
    with defer_signals():
        json_path = _write(out / REPORT_JSON, json.dumps(summary, indent=1) + "\n")
        markdown_path = _write(out / "report.md", markdown)
    for name in earlier - {p.name for p in plots}:  # the replaced report's, not this one's
        (out / name).unlink(missing_ok=True)
    return ReportPaths(markdown_path, json_path, plots, skipped, summary["missing_runs"])


def earlier_plots(out: Path) -> set[str]:
    """The plots an earlier report in `out` listed in its report.json (plain .png names only):
    what a new report there removes where it draws none of its own, so that another matrix's
    plots are not left beside it looking like part of it."""
    try:
        names = json.loads((out / REPORT_JSON).read_text())["plots"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    if not isinstance(names, list):
        return set()
    return {
        name
        for name in names
        if isinstance(name, str) and name.endswith(".png") and Path(name).name == name
    }


def no_records_message(results_dir: Path, skipped: Sequence[Skipped]) -> str:
    """Why there is nothing to report, in one line: one run's folder given for the results
    folder, no run folders, or why each was skipped."""
    if (results_dir / RECORD_FILE).is_file():
        parent = results_dir.resolve().parent
        here = f" (here {parent})" if (parent / "matrix.json").is_file() else ""
        return (
            f"{results_dir} is one run's folder (it holds {RECORD_FILE}): give the folder that "
            f"holds the run folders, the --results directory of `gameon bench run`{here}"
        )
    if not skipped:
        return (
            f"no run records in {results_dir}: nothing to report "
            "(give the --results directory of `gameon bench run`)"
        )
    first = skipped[0]
    folders = "1 run folder" if len(skipped) == 1 else f"{len(skipped)} run folders"
    return (
        f"no valid run records in {results_dir}: nothing to report ({folders} skipped, e.g. "
        f"{Path(first.path).name}: {first.reason.splitlines()[0]})"
    )


def read_matrix(results_dir: Path) -> dict | None:
    """The results folder's MATRIX_FILE, or None where there is none or it does not parse."""
    try:
        matrix = json.loads((results_dir / MATRIX_FILE).read_text())
    except (OSError, ValueError):
        return None
    return matrix if isinstance(matrix, dict) and "name" in matrix else None


def matrix_heading(matrix: dict | None) -> str | None:
    """The matrix's name and description, e.g. "smoke: ... (pipeline check, not a comparison)",
    so a report says what kind of run it summarises."""
    if matrix is None:
        return None
    return f"{matrix['name']}: {matrix.get('description') or 'no description'}"


def missing_runs(matrix: dict | None, records: Sequence[RunRecord]) -> list[str]:
    """The matrix's runs without a valid record (not yet run, interrupted, failed or left out
    with --only), so a report of part of a matrix says so."""
    reported = {record.run_id for record in records}
    return [run_id for run_id in planned_run_ids(matrix) if run_id not in reported]


def planned_run_ids(matrix: dict | None) -> list[str]:
    """The run ids the matrix plans, in its order (none without a readable matrix)."""
    if matrix is None or not isinstance(matrix.get("runs"), list):
        return []
    planned = [run.get("run_id") for run in matrix["runs"] if isinstance(run, dict)]
    return [run_id for run_id in planned if isinstance(run_id, str)]


IQM_CUT = (
    "the mean after a quarter of the runs, rounded down, is cut from each end, so the plain mean "
    "of 1 to 3 seeds and the mean of the middle 3 of 5"
)
"""What scipy's trim_mean(0.25) does with few runs: exactly the middle 50% only when 4 divides
their number."""
METHOD = (
    "Target success is each run's final success rate over the evaluation episodes of its target "
    "skills, recomputed from the per-episode outcomes; under collect v2 it is the composed "
    "policy's (the target task run as the skill library decomposes it, every step by the learned "
    "policy) on the target env's suite, and the monolithic policy's (conditioned on the task's "
    "own goal) is shown beside it. All-skills success is the same over every "
    "episode of the evaluation suite (for the collect protocol, every skill of the practice env). "
    "Runs are aggregated over seeds with the "
    f"interquartile mean (IQM, scipy trim_mean 0.25: {IQM_CUT}) and a 95% stratified-bootstrap "
    f"percentile interval (2000 resamples, seed 0; the curves' bands {CURVE_RESAMPLES}). "
    "P(> fixed) is the probability that a run of the "
    "curriculum beats a run of `fixed` (ties count one half), with its bootstrap interval. "
    "Entropies are normalised Shannon entropies of the collected tasks over the 7 skills and "
    "over the blocks named. VLM figures, wall time and steps/s are means per run."
)


def _seeds_text(runs: int) -> str:
    return f"{runs} seed" if runs == 1 else f"{runs} seeds"


def _plot_seeds_text(runs: int) -> str:
    """The seeds behind a curve or bar, saying when too few stand behind it for an interval."""
    if runs < MIN_RUNS_FOR_INTERVAL:
        return f"{_seeds_text(runs)}, no CI"
    return _seeds_text(runs)


def _interval(estimate: dict | None, runs: int, digits: int = 2) -> str:
    """The value and its 95% interval, e.g. "0.75 [0.50, 1.00]"; the interval reads "n/a (1 seed)"
    when fewer than MIN_RUNS_FOR_INTERVAL runs stand behind it."""
    if estimate is None:
        return "-"
    value = f"{estimate['value']:.{digits}f}"
    if runs < MIN_RUNS_FOR_INTERVAL:
        return f"{value} [n/a ({_seeds_text(runs)})]"
    return f"{value} [{estimate['low']:.{digits}f}, {estimate['high']:.{digits}f}]"


def markdown_text(text: object) -> str:
    """A value as one line of Markdown text that breaks neither a table nor a heading: line
    breaks become spaces, '|' is escaped, '<' written as an entity (a label or description is
    shown, never run, whatever viewer renders the file)."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(markdown_text(c) for c in row) + " |" for row in rows]
    return lines


def _legend(entries: Sequence[tuple[str, str]]) -> list[str]:
    """What each column of the table above means, one bullet per column."""
    return ["", "Columns:", "", *(f"- **{name}**: {meaning}" for name, meaning in entries)]


INTERVAL_NOTE = (
    f"the 95% stratified-bootstrap confidence interval in brackets, `n/a (1 seed)` when fewer "
    f"than {MIN_RUNS_FOR_INTERVAL} seeds stand behind it (a bootstrap over one or two runs only "
    "repeats them)"
)
GROUP_LEGEND = (
    (
        "protocol",
        "online (PPO/SAC, a curriculum picks each training episode) or collect (the Game On "
        "cycle with BC/IQL; v2: the learner collects its own data)",
    ),
    ("env", "the target env: its skills are the target skills"),
    ("curriculum", "what chose the tasks; `vlm[rules]` is the offline rules stand-in, not a VLM"),
    ("learner", "the RL or offline learner"),
    (
        "seeds",
        "how many runs the row aggregates, one per seed, then those seeds: "
        "`5 (0, 1, 2, 3, 4)` is five runs with seeds 0 to 4",
    ),
    (
        "target success IQM [95% CI]",
        "final success rate on the target skills (collect v2: the composed policy's on the "
        f"target env's suite) as the interquartile mean (IQM: {IQM_CUT}) over the runs, with "
        f"{INTERVAL_NOTE}",
    ),
    ("mean", "the plain mean of the same per-run rates"),
    ("all-skills IQM [95% CI]", "the same over every skill of the evaluation suite"),
    ("per-skill IQM", "each skill's final success rate, IQM over the runs"),
    (
        "P(> fixed) [95% CI]",
        "probability of improvement: the chance that a run of this curriculum beats a run of "
        "`fixed` (same protocol, learner and env) on target success, ties counting one half "
        "(0.50: no difference), with its interval as above (n/a below "
        f"{MIN_RUNS_FOR_INTERVAL} seeds on either side); `-` for `fixed` itself",
    ),
    ("P(> fixed), all skills", "the same on all-skills success"),
    (
        "entropy skills / objects",
        "how evenly the collected tasks spread over the 7 skills and over the blocks named: "
        "normalised Shannon entropy, 0 for one only, 1 for all equally; `-` for runs that "
        "collect no dataset (online)",
    ),
    ("VLM calls", "model calls per run (the rules stand-in's calls included)"),
    (
        "VLM tokens",
        "prompt and completion tokens per run, as the server reported them (0 for the rules "
        "stand-in)",
    ),
    ("VLM cost (USD)", "what those tokens cost per run, from the price table"),
    ("wall time (s)", "seconds per run, start to record"),
    ("steps/s", "environment steps per second of wall time, per run"),
)
ACROSS_LEGEND = (
    ("protocol, curriculum, learner", "as in the first table"),
    ("envs", "the target envs pooled, each a stratum of the bootstrap"),
    ("IQM [95% CI]", f"target success over every run of those envs, with {INTERVAL_NOTE}"),
    ("P(> fixed)", "probability of improvement over `fixed`, averaged over the envs both ran"),
)


def pipeline_banner(summary: dict) -> str | None:
    """A warning that the report is a pipeline check whose numbers rank nothing: every group has
    fewer than MIN_RUNS_FOR_INTERVAL seeds (said as the smoke preset's purpose where the matrix
    is named smoke); None otherwise, a copy of the smoke preset given seeds enough included."""
    matrix = summary.get("matrix") or ""
    seeds = [len(group["seeds"]) for group in summary["groups"]]
    if not seeds or max(seeds) >= MIN_RUNS_FOR_INTERVAL:
        return None
    if matrix.split(":")[0] == "smoke":
        why = "This is the smoke preset: tiny budgets and one seed, to check that every part runs"
    else:
        why = f"Every row has fewer than {MIN_RUNS_FOR_INTERVAL} seeds, so none has an interval"
    return (
        f"> **Pipeline check: these numbers rank nothing.** {why}. "
        "For a comparison run `gameon bench run paper` (5 seeds)."
    )


def render_markdown(summary: dict) -> str:
    """The report's Markdown: the group table, the controls check, what each comparison with
    `fixed` lets one conclude, the across-env table, plots and skipped runs, each table followed
    by what its columns mean."""
    heading = "# Benchmark report"
    if summary.get("matrix"):
        heading += f" ({markdown_text(summary['matrix'])})"
    lines = [heading, ""]
    banner = pipeline_banner(summary)
    if banner:
        lines += [banner, ""]
    lines += [
        f"{summary['records']} run records from `{summary['results_dir']}`, "
        f"{len(summary['skipped'])} skipped; generated {summary['generated']}.",
        "",
    ]
    missing = summary.get("missing_runs") or []
    if missing:
        lines += [
            f"> **Part of the matrix:** {len(missing)} of its runs have no record "
            f"(e.g. `{missing[0]}`: not run yet, interrupted, failed or left out with `--only`); "
            "the same `gameon bench run` on this folder runs them.",
            "",
        ]
    seeds = _seeds_by_comparison(summary["groups"])
    header = [name for name, _ in GROUP_LEGEND]
    rows = [_group_row(group, seeds) for group in summary["groups"]]
    lines += _table(header, rows) if rows else ["No valid run records."]
    if rows:
        lines += _legend(GROUP_LEGEND)
    lines += _budget_lines(summary["groups"])
    lines += _vlm_lines(summary["groups"])
    lines += _target_lines(summary["groups"])
    lines += _controls_lines(summary.get("controls", []), seeds)
    lines += _comparison_lines(summary["groups"], summary.get("controls", []), seeds)
    if summary["across_envs"]:
        lines += ["", "## Across envs", ""]
        header = ["protocol", "curriculum", "learner", "envs", "IQM [95% CI]", "P(> fixed)"]
        rows = []
        for row in summary["across_envs"]:
            key = (row["protocol"], row["learner"])
            runs = min(seeds[(*key, env, row["curriculum_label"])] for env in row["envs"])
            fixed = [seeds.get((*key, env, BASELINE), 0) for env in row["improvement_envs"]]
            rows.append(
                [
                    row["protocol"],
                    row["curriculum_label"],
                    row["learner"],
                    ", ".join(row["envs"]),
                    _interval(row["target_success"], runs),
                    _interval(row["improvement_over_fixed"], min([runs, *fixed])),
                ]
            )
        lines += _table(header, rows)
        lines += _legend(ACROSS_LEGEND)
    if summary["plots"]:
        lines += ["", "## Plots", ""]
        lines += [f"![{name}]({name})" for name in summary["plots"]]
    if summary["skipped"]:
        lines += ["", "## Skipped", ""]
        lines += [f"- `{s['path']}`: {s['reason']}" for s in summary["skipped"]]
    lines += ["", "## Method", "", summary["method"], ""]
    return "\n".join(lines)


def _seeds_by_comparison(groups: Sequence[dict]) -> dict[tuple[str, str, str, str], int]:
    """Runs per (protocol, learner, env, curriculum label), to judge each interval by."""
    return {
        (g["protocol"], g["learner"], g["env_id"], g["curriculum_label"]): len(g["seeds"])
        for g in groups
    }


def _baseline_seeds(group: dict, seeds: dict[tuple[str, str, str, str], int]) -> int:
    """Runs behind a P(> fixed): the fewer of the group's and its `fixed` group's."""
    fixed = seeds.get((group["protocol"], group["learner"], group["env_id"], BASELINE), 0)
    return min(len(group["seeds"]), fixed)


def _budget_lines(groups: Sequence[dict]) -> list[str]:
    """A line per group whose runs trained on different budgets (e.g. one extended outside its
    matrix, or records of two matrices gathered in one folder): its row pools them."""
    lines = [
        f"- **Budgets differ**: the {len(group['seeds'])} runs of {group['curriculum_label']} "
        f"({group['protocol']}, {group['learner']}, {group['env_id']}) trained on "
        f"{len(group['budgets'])} budgets ({'; '.join(group['budgets'])}), which its row pools; "
        "the leaderboard refuses such a group."
        for group in groups
        if len(group.get("budgets", ())) > 1
    ]
    return ["", *lines] if lines else []


def _vlm_lines(groups: Sequence[dict]) -> list[str]:
    """A line per group with runs none of whose model's answers was used (`unused_model`), one
    per group with answered runs that fell back for some consultations, and one per group whose
    runs hit their VLM spending cap: all or part of their practice was then
    chosen by the learning-progress fallback, not by the model."""
    lines = []
    for group in groups:
        vlm = group["vlm"]
        if vlm.get("unanswered_runs"):
            lines.append(
                f"- **VLM never answered**: in {vlm['unanswered_runs']} of "
                f"{len(group['seeds'])} runs of {group['curriculum_label']} ({group['protocol']}, "
                f"{group['learner']}, {group['env_id']}) no answer of the model was used (none "
                "came, or none was valid), so all their practice was learning progress's choice, "
                "not the model's (the leaderboard refuses such runs)."
            )
        if vlm.get("fallback_runs"):
            lines.append(
                f"- **VLM fell back**: in {vlm['fallback_runs']} of {len(group['seeds'])} runs of "
                f"{group['curriculum_label']} ({group['protocol']}, {group['learner']}, "
                f"{group['env_id']}) that the model did answer, "
                f"{vlm['fallbacks_of_answered_runs']} consultations fell back to learning "
                "progress (a call that failed, or stayed invalid after its re-asks; each run's "
                "transcript.jsonl says why), so part of their practice was not the model's choice."
            )
        if not vlm.get("capped_runs"):
            continue
        lines.append(
            f"- **VLM cost cap hit**: {vlm['capped_runs']} of {len(group['seeds'])} runs of "
            f"{group['curriculum_label']} ({group['protocol']}, {group['learner']}, "
            f"{group['env_id']}) reached their spending cap; {vlm['total']['capped_calls']} "
            "module calls then fell back to learning progress without a request (counted in "
            "the fallbacks), so part of their practice was not the model's choice."
        )
    return ["", *lines] if lines else []


def _target_lines(groups: Sequence[dict]) -> list[str]:
    """The collect v2 final evaluations: one column per (env, mode), IQM [95% CI] (mean)."""
    columns = list(
        dict.fromkeys(
            (t["env_id"], t["mode"]) for g in groups for t in g.get("target_evaluations", [])
        )
    )
    if not columns:
        return []
    header = ["protocol", "env", "curriculum", "learner", "seeds"]
    header += [f"{env.split('/')[-1]} {mode} IQM [95% CI] (mean)" for env, mode in columns]
    rows = []
    for group in groups:
        found = {(t["env_id"], t["mode"]): t for t in group.get("target_evaluations", [])}
        if not found:
            continue
        runs = len(group["seeds"])
        cells = [
            f"{_interval(found[c]['success'], runs)} ({found[c]['mean']:.2f})"
            if c in found
            else "-"
            for c in columns
        ]
        rows.append(
            [
                group["protocol"],
                group["env_id"],
                group["curriculum_label"],
                group["learner"],
                runs,
                *cells,
            ]
        )
    episodes = sorted(
        {
            n
            for g in groups
            for t in g.get("target_evaluations", [])
            for n in t["episodes_per_skill"]
        }
    )
    legend = [
        ("protocol, env, curriculum, learner", "as in the first table (env: the target env)"),
        ("seeds", "how many runs (one per seed) the row aggregates"),
        (
            "ENV MODE IQM [95% CI] (mean)",
            "final success of the policy in that mode on ENV's target skills: IQM over the "
            f"runs with {INTERVAL_NOTE}, then the plain mean",
        ),
    ]
    return [
        "",
        "## Final target evaluations",
        "",
        "composed: the task run as the skill library decomposes it, every step by the learned "
        "policy (no scripted executor); monolithic: the policy conditioned on the task's own goal. "
        f"Episodes per skill: {', '.join(map(str, episodes))}. The leaderboard ranks composed.",
        "",
        *_table(header, rows),
        *_legend(legend),
    ]


def _controls_lines(
    checks: Sequence[dict], seeds: dict[tuple[str, str, str, str], int]
) -> list[str]:
    if not checks:
        return []
    lines = ["", "## Controls", ""]
    for check in checks:
        key = (check["protocol"], check["learner"], check["env_id"])
        positive, negative = seeds.get((*key, POSITIVE), 0), seeds.get((*key, NEGATIVE), 0)
        if check["separated"] is None:
            verdict = f"not judged: no intervals with {_seeds_text(check['runs'])}"
        elif check["separated"]:
            verdict = "separated"
        elif check["reversed"]:
            verdict = "REVERSED (the negative control scores higher): this comparison is blind"
        elif check["chance"]:
            verdict = f"NOT separated ({check['chance']}): this comparison is blind"
        else:
            verdict = "NOT separated (the intervals overlap): this comparison is blind"
        lines.append(
            f"- {check['protocol']} / {check['env_id']} / {check['learner']}: positive control "
            f"{_interval(check['positive'], positive)} vs negative control "
            f"{_interval(check['negative'], negative)} on the target: {verdict}."
        )
    return lines


def comparison_verdict(group: dict, fixed: dict, runs: int) -> str:
    """What a curriculum's target results let one conclude against `fixed`'s, by the rule of
    the controls check (`beats`); not judged below MIN_RUNS_FOR_INTERVAL seeds on either side."""
    if runs < MIN_RUNS_FOR_INTERVAL:
        return f"not judged: no intervals with {_seeds_text(runs)}"
    if beats(group, fixed):
        return "better than fixed (the intervals do not overlap)"
    if beats(fixed, group):
        return "worse than fixed (the intervals do not overlap)"
    chance = chance_note(group, fixed) or chance_note(fixed, group)
    return f"no difference shown ({chance or 'the intervals overlap'})"


def _comparison_lines(
    groups: Sequence[dict], checks: Sequence[dict], seeds: dict[tuple[str, str, str, str], int]
) -> list[str]:
    """A line per curriculum compared with `fixed` on the target: what the two intervals let one
    conclude, and that nothing is ranked where the controls ran and did not separate."""
    fixed = {
        (g["protocol"], g["learner"], g["env_id"]): g
        for g in groups
        if g["curriculum_label"] == BASELINE
    }
    blind = {(c["protocol"], c["learner"], c["env_id"]) for c in checks if c["separated"] is False}
    lines = []
    for group in groups:
        key = (group["protocol"], group["learner"], group["env_id"])
        baseline = fixed.get(key)
        if baseline is None or group is baseline:
            continue
        runs = _baseline_seeds(group, seeds)
        verdict = comparison_verdict(group, baseline, runs)
        if key in blind:
            verdict += "; but the controls did not separate here, so this ranks nothing"
        own, theirs = len(group["seeds"]), len(baseline["seeds"])
        lines.append(
            f"- {group['protocol']} / {group['env_id']} / {group['learner']}: "
            f"{markdown_text(group['curriculum_label'])} "
            f"{_interval(group['target_success'], own)} vs fixed "
            f"{_interval(baseline['target_success'], theirs)}, P(> fixed) "
            f"{_interval(group['improvement_over_fixed'], runs)}: {verdict}."
        )
    if not lines:
        return []
    return [
        "",
        "## Comparisons with fixed",
        "",
        "On target success, by the rule of the controls check: a curriculum is called better or "
        "worse than `fixed` only when their 95% intervals do not overlap and the pooled target "
        "episodes differ beyond chance (one-sided Fisher's exact test, p < "
        f"{EPISODES_ALPHA:.2f}). With few seeds a bootstrap interval is narrow (it cannot show "
        "variation the runs did not have), so a P(> fixed) interval that excludes 0.50 alone is "
        "not taken as a difference.",
        "",
        *lines,
    ]


def _group_row(group: dict, seeds: dict[tuple[str, str, str, str], int]) -> list[object]:
    per_skill = ", ".join(f"{k} {v:.2f}" for k, v in group["per_skill_iqm"].items())
    div = group["diversity"]
    entropy = "-" if div is None else f"{div['skills_entropy']:.2f} / {div['objects_entropy']:.2f}"
    vlm = group["vlm"]["per_run"]
    runs = len(group["seeds"])
    versus = _baseline_seeds(group, seeds)
    return [
        group["protocol"],
        group["env_id"],
        group["curriculum_label"],
        group["learner"],
        f"{runs} ({', '.join(str(s) for s in group['seeds'])})",
        _interval(group["target_success"], runs),
        f"{group['target_success_mean']:.2f}",
        _interval(group["suite_success"], runs),
        per_skill,
        _interval(group["improvement_over_fixed"], versus),
        _interval(group["suite_improvement_over_fixed"], versus),
        entropy,
        f"{vlm['calls']:.0f}" if float(vlm["calls"]).is_integer() else f"{vlm['calls']:.1f}",
        f"{vlm['prompt_tokens'] + vlm['completion_tokens']:.0f}",
        f"{vlm['cost_usd']:.4f}",
        f"{group['wall_seconds_mean']:.0f}",
        f"{group['steps_per_second_mean']:.0f}",
    ]


# -- plots ------------------------------------------------------------------------------------


def curve_band(
    records: Sequence[RunRecord],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps, IQM and 95% CI over runs of the evaluated success curve; runs whose steps differ
    are interpolated onto the steps from the latest first evaluation on, and a run that ended
    before the others (auto_stop ends a run once it masters its target) is held at its last
    value, so the curriculum that succeeds early is not cut to its shortest run."""
    curves = [
        (np.array([p.step for p in r.curve], float), np.array([p.success_rate for p in r.curve]))
        for r in records
    ]
    steps = np.unique(np.concatenate([s for s, _ in curves]))
    covered = steps[steps >= max(s.min() for s, _ in curves)]
    grid = covered if covered.size else steps
    values = np.array([np.interp(grid, s, v) for s, v in curves])
    bands = [iqm_ci([values[:, i]], n_resamples=CURVE_RESAMPLES) for i in range(grid.size)]
    return (
        grid,
        np.array([b.value for b in bands]),
        np.array([b.low for b in bands]),
        np.array([b.high for b in bands]),
    )


def write_plots(records: Sequence[RunRecord], out: Path) -> list[Path]:
    """Per (protocol, learner, env): learning curves with CI bands and final success with CI
    bars, one line or bar per curriculum label."""
    import matplotlib

    matplotlib.use("Agg")
    comparisons: dict[tuple[str, str, str], dict[str, list[RunRecord]]] = {}
    for (protocol, label, learner, env_id), runs in group_records(records).items():
        comparisons.setdefault((protocol, learner, env_id), {})[label] = runs
    paths = []
    for (protocol, learner, env_id), by_label in comparisons.items():
        slug = re.sub(r"[^A-Za-z0-9.-]+", "_", f"{protocol}_{env_id.split('/')[-1]}_{learner}")
        slug = slug.strip("_")
        title = f"{protocol} / {env_id} / {learner}"
        paths.append(_plot_curves(by_label, title, out / f"curves_{slug}.png"))
        paths.append(_plot_final(by_label, title, out / f"final_{slug}.png"))
        shares = {
            f"{label} ({len(runs)} {'seed' if len(runs) == 1 else 'seeds'})": practised(runs)
            for label, runs in by_label.items()
        }
        if any(shares.values()):
            paths.append(_plot_practised(shares, title, out / f"practised_{slug}.png"))
    return paths


def _plot_practised(
    shares: dict[str, list[dict[str, float]] | None], title: str, path: Path
) -> Path:
    """One panel per curriculum (titled with its seed count): the mean share of each skill among
    the tasks it chose, per iteration, as stacked bars (whether a curriculum reacts to the
    learner shows here). The title wraps to the figure's width, which one panel makes narrow."""
    import matplotlib.pyplot as plt

    labels = [label for label, value in shares.items() if value]
    width = 2.2 * len(labels) + 1.5
    figure, axes = plt.subplots(1, len(labels), figsize=(width, 3.4), sharey=True, squeeze=False)
    colours = plt.get_cmap("tab10")
    for axis, label in zip(axes[0], labels, strict=True):
        iterations = shares[label]
        positions = np.arange(1, len(iterations) + 1)
        bottom = np.zeros(len(iterations))
        for index, skill in enumerate(SKILLS):
            heights = np.array([share[skill] for share in iterations])
            axis.bar(positions, heights, bottom=bottom, color=colours(index), label=skill)
            bottom += heights
        axis.set_title(wrap_label(label, 26), fontsize="small")
        axis.set_xticks(positions)
        axis.set_xlabel("iteration")
    axes[0][0].set_ylabel("share of practised tasks")
    axes[0][-1].legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    heading = textwrap.fill(f"{title}: what each curriculum practised", width=int(width * 11))
    figure.suptitle(heading, fontsize="medium")
    return _save(figure, path)


def _plot_curves(by_label: dict[str, list[RunRecord]], title: str, path: Path) -> Path:
    """Learning curves with CI bands, one per curriculum; each has its own marker and line style
    and is shifted a little along x, so curves that coincide (e.g. all at 0) stay visible."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(figsize=(9.0, 4.0))
    unit = "env steps"
    bands = {label: curve_band(runs) for label, runs in by_label.items()}
    evaluated = np.unique(np.concatenate([band[0] for band in bands.values()]))
    spacing = float(np.diff(evaluated).min()) if evaluated.size > 1 else 1.0
    for index, (label, runs) in enumerate(by_label.items()):
        steps, value, low, high = bands[label]
        shift = curve_offset(index, len(by_label), spacing)
        unit = "iterations" if runs[0].curve_unit == "iterations" else "env steps"
        ended = sum(r.curve[-1].step < steps[-1] for r in runs)
        last = "its last value" if ended == 1 else "their last values"
        held = f"; {ended} ended early, held at {last}" if ended else ""
        (line,) = axes.plot(
            steps + shift,
            value,
            marker=CURVE_MARKERS[index % len(CURVE_MARKERS)],
            linestyle=CURVE_LINES[index % len(CURVE_LINES)],
            markersize=5,
            label=wrap_label(f"{label} ({_plot_seeds_text(len(runs))}{held})", 34),
        )
        if len(runs) >= MIN_RUNS_FOR_INTERVAL:
            axes.fill_between(steps + shift, low, high, color=line.get_color(), alpha=0.15)
    ylabel = "all-skills success (IQM, 95% CI)"
    xlabel = f"{unit} (curricula shifted slightly apart)" if len(by_label) > 1 else unit
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel, ylim=(-0.04, 1.04))
    if unit == "iterations":
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the data
    axes.grid(alpha=0.3)
    return _save(figure, path)


def wrap_label(label: str, width: int) -> str:
    """A curriculum label in lines of at most about `width` characters, broken after a space,
    ':', '/', '_' or '-' (a run longer than a line is cut), so that long VLM labels such as
    "vlm[openai:Qwen/Qwen2.5-VL-7B-Instruct]" neither run into each other nor off a plot."""
    lines, line = [], ""
    for piece in re.findall(r"[^ :/_-]*[ :/_-]|[^ :/_-]+$", label):
        while len(piece) > width:
            if line:
                lines.append(line.rstrip())
                line = ""
            lines.append(piece[:width])
            piece = piece[width:]
        if line and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    if line:
        lines.append(line.rstrip())
    return "\n".join(lines) or label


def curve_offset(index: int, count: int, spacing: float) -> float:
    """The x shift of the index-th of `count` curves: spread over 20% of the smallest spacing
    between evaluated steps, centred on the true steps."""
    if count < 2:
        return 0.0
    return (index / (count - 1) - 0.5) * 0.2 * spacing


def _plot_final(by_label: dict[str, list[RunRecord]], title: str, path: Path) -> Path:
    """Bars of final target and all-skills success per curriculum, with 95% CI whiskers where
    at least MIN_RUNS_FOR_INTERVAL runs stand behind them."""
    import matplotlib.pyplot as plt

    labels = list(by_label)
    measures = {
        "target skills": lambda runs: target_success(runs),
        "all skills": lambda runs: [r.evaluation.success_rate() for r in runs],
    }
    figure, axes = plt.subplots(figsize=(max(1.4 * len(labels) + 2.5, 5.0), 4.0))
    width = 0.38
    for offset, (name, scores) in zip((-width / 2, width / 2), measures.items(), strict=True):
        estimates: list[Estimate] = [iqm_ci([scores(by_label[k])]) for k in labels]
        values = np.array([e.value for e in estimates])
        errors = np.array(
            [[e.value - e.low for e in estimates], [e.high - e.value for e in estimates]]
        )
        positions = np.arange(len(labels)) + offset
        bars = axes.bar(positions, values, width, alpha=0.8, label=name)
        axes.bar_label(bars, ["0" if value == 0 else "" for value in values], fontsize="x-small")
        shown = np.array([len(by_label[k]) >= MIN_RUNS_FOR_INTERVAL for k in labels])
        if shown.any():
            axes.errorbar(
                positions[shown], values[shown], errors[:, shown], fmt="none", capsize=4, ecolor="k"
            )
    axes.set_xticks(
        range(len(labels)),
        [f"{wrap_label(k, 16)}\n({_plot_seeds_text(len(by_label[k]))})" for k in labels],
    )
    axes.set(ylabel="final success (IQM, 95% CI)", ylim=(0, 1.05), xlim=(-0.75, len(labels) - 0.25))
    axes.set_title(title, fontsize="medium")
    axes.legend(fontsize="small")
    axes.grid(axis="y", alpha=0.3)
    return _save(figure, path)


def _save(figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return _write(path, buffer.getvalue())


def _write(path: Path, data: str | bytes) -> Path:
    """Write one of the report's files atomically; ValueError naming it if the folder refuses."""
    try:
        return atomic_write(path, data)
    except OSError as error:
        raise ValueError(f"cannot write {path}: {error.strerror or error}") from None
