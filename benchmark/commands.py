"""`gameon bench run|report` and `gameon leaderboard submit`, also runnable on their own:

    python -m gameon.benchmark.commands bench run [SPEC] [--results DIR] [--runner local|ray] ...
    python -m gameon.benchmark.commands bench report DIR
    python -m gameon.benchmark.commands leaderboard submit RUNS... [--verify]
    python -m gameon.benchmark.commands leaderboard audit ENTRY [--runs K]
    python -m gameon.benchmark.commands leaderboard html [--board DIR] [--out HTML]

`main(argv)` takes the arguments after `gameon` (starting with "bench" or "leaderboard") and
returns the exit status: 0 success, 1 a run or a submission failed, an audit did not reproduce
or the Ray cluster was lost, 2 a usage error or an audit that could not re-run a run here (it
writes nothing), 130 interrupted.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from gameon.atomic import write_failure_line
from gameon.benchmark.matrix import DEFAULT_PRESET, PRESETS
from gameon.extras import missing_extra
from gameon.text import plural

DEFAULT_RESULTS_ROOT = Path("runs") / "bench"
COMMANDS = {
    ("bench", "run"): "run a benchmark matrix and write one validated record per run",
    ("bench", "report"): "aggregate a results directory into a table, a JSON summary and plots",
    ("leaderboard", "submit"): "validate run records and add them to the leaderboard",
    ("leaderboard", "audit"): "re-train sampled runs of an entry and mark it audited or not",
    ("leaderboard", "html"): "write the static leaderboard page (results/leaderboard/index.html)",
}


@dataclass
class BenchRun:
    """Run a benchmark matrix (a preset or a TOML spec); rerun the same command to resume."""

    spec: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="SPEC")] = DEFAULT_PRESET
    """a preset (smoke, paper, controls, full) or the path of a matrix spec in TOML"""
    results: Path | None = None
    """results folder (created if missing; one matrix per folder); default runs/bench/{spec name}"""
    runner: Literal["local", "ray"] = "local"
    """local: a process pool on this machine; ray: a Ray cluster (RAY_ADDRESS or --ray-address,
    else a local one)"""
    workers: int | None = None
    """runs at once; default the number of CPUs (of the cluster, with a Ray address)"""
    retries: int = 1
    """extra attempts of a run whose worker raised or died"""
    ray_address: str | None = None
    """Ray cluster address; default RAY_ADDRESS, else a local cluster"""
    only: str | None = None
    """run only the runs whose id contains this text, or with *, ? or [ matches it whole as a glob
    ('*__s1': seed 1 alone, where s1 also picks s10)"""
    report: bool = True
    """write the report (table, JSON summary, plots) into the results folder at the end, as
    `gameon bench report` does"""


@dataclass
class BenchReport:
    """Aggregate the run records of a results directory into a table, a JSON summary and plots."""

    results_dir: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="DIR")]
    """the results directory of `gameon bench run`"""
    out: Path | None = None
    """the folder the report goes into (report.md, report.json and the plots; created if missing),
    not a file name; default the results directory"""


@dataclass
class LeaderboardSubmit:
    """Validate run records (files or run folders) and add the accepted ones to the leaderboard."""

    runs: Annotated[list[Path], tyro.conf.Positional, tyro.conf.arg(metavar="RUNS")]
    """record.json files or run folders"""
    board: Path = Path("results")
    """the folder of leaderboard.json and LEADERBOARD.md"""
    verify: bool = False
    """re-evaluate each submitted checkpoint and reject claims it cannot reproduce"""


@dataclass
class LeaderboardAudit:
    """Re-train K sampled runs of a leaderboard entry from their records, compare the evaluation
    with the claim (bitwise on the same machine, library versions and commit, else within a
    stated binomial tolerance) and write the outcome into the entry."""

    entry: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="ENTRY")]
    """the entry id, e.g. 0007-2e7081d0, or its number, e.g. 0007"""
    runs: int = 2
    """runs to sample and re-train (K, at most the entry's runs)"""
    seed: int = 0
    """seed of the sampling of the runs"""
    board: Path = Path("results")
    """the folder of leaderboard.json and LEADERBOARD.md"""
    work: Path = Path("runs") / "audit"
    """where the re-runs train (WORK/ENTRY/RUN-CONFIG; an interrupted audit resumes there)"""


@dataclass
class LeaderboardHtml:
    """Write the leaderboard as one static page that opens from the file system (no server)."""

    board: Path | None = None
    """the folder of leaderboard.json, as submit and audit take it; default results"""
    leaderboard: Path | None = None
    """the board's leaderboard.json file: the older spelling of --board (give one of the two)"""
    out: Path | None = None
    """the page; default index.html in the board's entries folder (results/leaderboard/)"""
    screenshot: bool = False
    """also save page.png beside the page, taken in headless Chromium (1400x900)"""


def bench_run(command: BenchRun) -> int:
    """Check the spec and the results folder, say what will run and how long it should take, run
    the matrix, then say where the records are and how to make the table and plots."""
    from rich.console import Console

    from gameon.benchmark.matrix import check_spec, load_spec
    from gameon.benchmark.runner import (
        ClusterLost,
        RunnerOptions,
        check_matrix_file,
        check_ray_head,
        duration_text,
        plan_line,
        ray_address,
        results_lock,
        run_matrix,
        select_runs,
        vlm_lines,
    )

    started = time.monotonic()
    console = Console(soft_wrap=True)  # a path folded at 80 columns in a log cannot be copied
    spec = load_spec(command.spec, check=False)
    results = command.results or DEFAULT_RESULTS_ROOT / spec.name
    options = RunnerOptions(
        runner=command.runner,
        workers=command.workers,
        retries=command.retries,
        ray_address=command.ray_address,
        only=command.only,
    )
    options.validate()
    if command.report:
        import matplotlib  # noqa: F401  (the report needs both: if missing, say so before the runs)

        import gameon.benchmark.report  # noqa: F401
    check_spec(spec)
    select_runs(spec, options.only)
    # Every refusal before the plan line, which promises work: the folder (opened as the lock
    # is taken), another invocation at work there, another matrix's results.
    with results_lock(results):
        pass
    check_matrix_file(spec, results)
    if options.runner == "ray" and (address := ray_address(options.ray_address)):
        check_ray_head(address)
    console.print(plan_line(spec, results, options), markup=False)
    console.print(f"matrix {spec.name!r}: {spec.description or command.spec}", markup=False)
    for note in spec.notes:
        console.print(note, markup=False)
    for line in vlm_lines(spec, results, options):  # paid VLM backends: calls and cost first
        console.print(line, markup=False)
    try:
        outcome = run_matrix(spec, results, options, console)
    except ClusterLost as error:
        sys.stdout.flush()
        print(f"gameon bench run: {error}", file=sys.stderr, flush=True)
        return 1
    console.print(
        f"{plural(outcome.count('done'), 'run')} done now, "
        f"{outcome.count('skipped')} finished before, "
        f"{outcome.count('failed')} failed, {outcome.retried} retried "
        f"({duration_text(time.monotonic() - started)})"
    )
    console.print(
        f"records: {results}/<run_id>/record.json (matrix: {results}/matrix.json)", markup=False
    )
    for result in outcome.results:
        if result.status == "failed":
            console.print(
                f"  failed: {result.run_id} (see {results / result.run_id}/error.txt)", markup=False
            )
    report_ok = True
    if command.report:
        report_ok = _report_after_run(results, console)
    else:
        console.print(f"table and plots: gameon bench report {results}", markup=False)
    return 0 if outcome.ok and report_ok else 1


def _report_after_run(results: Path, console) -> bool:
    from rich.markup import escape

    command = f"gameon bench report {results}"
    if importlib.util.find_spec("gameon.benchmark.report") is None:
        console.print(
            f"table and plots: {command} (the report module is not installed yet)", markup=False
        )
        return True
    console.print(f"writing the table and plots ({command})", markup=False)
    try:
        status = bench_report(BenchReport(results))
    except ValueError as error:  # e.g. no valid record: the same command would say the same
        console.print(f"[red]no report[/red]: {escape(str(error))}")
        return False
    except Exception as error:  # noqa: BLE001  (the runs are safe; say why the report is not)
        console.print(
            f"[red]the report failed[/red]: {escape(f'{type(error).__name__}: {error}')}; "
            f"retry with: {escape(command)}"
        )
        return False
    return status == 0


def bench_report(command: BenchReport) -> int:
    """Write the report of a results directory and print where its files are."""
    from gameon.benchmark.report import write_report

    if not command.results_dir.is_dir():
        raise ValueError(f"no results directory at {command.results_dir}")
    if command.out is not None:
        check_out(command.out, command.results_dir)
    paths = write_report(command.results_dir, command.out)
    print(f"table: {paths.markdown}")
    print(f"summary: {paths.json}")
    for plot in paths.plots:
        print(f"plot: {plot}")
    if paths.skipped:
        count = len(paths.skipped)
        print(f"skipped {plural(count, 'run folder')} (listed in the table):")
        for skipped in paths.skipped:
            print(f"  {skipped.path}: {skipped.reason}")
    if paths.missing:
        print(
            f"part of the matrix: {len(paths.missing)} of its runs have no record (e.g. "
            f"{paths.missing[0]}); the same `gameon bench run` on {command.results_dir} runs them"
        )
    return 0


FILE_SUFFIXES = (".md", ".markdown", ".json", ".html", ".png", ".txt", ".csv", ".pdf")
"""Suffixes of files a user may give --out by mistake: the report is a folder of files."""


def check_out(out: Path, results_dir: Path) -> None:
    """Refuse an --out that names a file (e.g. report.md) rather than the report's folder, unless
    that folder already exists, and one that is another matrix's results folder, whose own report
    this one would replace."""
    from gameon.benchmark.runner import MATRIX_FILE

    if out.suffix.lower() in FILE_SUFFIXES and not out.is_dir():
        raise ValueError(
            f"--out {out} names a file; --out is the folder the report goes into (report.md, "
            f"report.json and the plots, created if missing), e.g. --out {out.with_suffix('')}"
        )
    if (out / MATRIX_FILE).is_file() and out.resolve() != results_dir.resolve():
        raise ValueError(
            f"--out {out} holds another matrix's results ({MATRIX_FILE}), whose report this one "
            f"would replace; give another folder, or leave --out out to write into {results_dir}"
        )


def leaderboard_submit(command: LeaderboardSubmit) -> int:
    """Submit run records to the leaderboard; print what was accepted or why not."""
    from gameon.benchmark.leaderboard import submit
    from gameon.benchmark.leaderboard_page import update_page

    submission = submit(command.runs, board_dir=command.board, verify=command.verify)
    if submission.accepted:
        print(
            f"accepted as entry {submission.entry_id} (audit it with: gameon leaderboard audit "
            f"{submission.entry_id.split('-')[0]} --board {command.board})"
        )
        print(f"table: {command.board / 'LEADERBOARD.md'} regenerated")
        print(f"page: {update_page(command.board)} regenerated")
        return 0
    print("rejected:")
    for reason in submission.reasons:
        print(f"  - {reason}")
    return 1


def leaderboard_audit(command: LeaderboardAudit) -> int:
    """Audit an entry; exit 0 if every sampled run reproduced its claim, else 1 (2, with
    nothing written, if a re-run fails here)."""
    from gameon.benchmark.audit import audit_entry
    from gameon.benchmark.leaderboard_page import update_page

    audit = audit_entry(
        command.entry, command.runs, command.board, seed=command.seed, work_root=command.work
    )
    print(f"page: {update_page(command.board)} regenerated")
    return 0 if audit.audited else 1


def leaderboard_html(command: LeaderboardHtml) -> int:
    """Write the leaderboard page (and its screenshot) and print where they are."""
    from gameon.benchmark.leaderboard_page import (
        BOARD_FILE,
        SCREENSHOT_FILE,
        screenshot,
        write_page,
    )

    if command.leaderboard is not None and command.board is not None:
        raise ValueError("give the board once: --board FOLDER or --leaderboard FILE, not both")
    page = write_page(
        command.leaderboard or (command.board or Path("results")) / BOARD_FILE, command.out
    )
    print(f"page: {page} (open it in a browser: {page.resolve().as_uri()})")
    if command.screenshot:
        print(f"screenshot: {screenshot(page, page.parent / SCREENSHOT_FILE)}")
    return 0


HANDLERS = {
    ("bench", "run"): (BenchRun, bench_run),
    ("bench", "report"): (BenchReport, bench_report),
    ("leaderboard", "submit"): (LeaderboardSubmit, leaderboard_submit),
    ("leaderboard", "audit"): (LeaderboardAudit, leaderboard_audit),
    ("leaderboard", "html"): (LeaderboardHtml, leaderboard_html),
}


def usage(keys: list[tuple[str, str]] | None = None) -> str:
    """The commands this module runs (or those of `keys`, e.g. bench's), one a line."""
    keys = keys or list(COMMANDS)
    groups = list(dict.fromkeys(key[0] for key in keys))
    if len(groups) == 1:
        command = f"{groups[0]} {{{','.join(key[1] for key in keys)}}}"
    else:
        command = f"{{{','.join(groups)}}} SUBCOMMAND"
    lines = [f"usage: gameon {command} [OPTIONS]   (add --help for a subcommand's options)"]
    lines += [f"  gameon {' '.join(key):20s} {COMMANDS[key]}" for key in keys]
    if ("bench", "run") in keys:
        lines.append(f"  presets: {', '.join(PRESETS)} (default {DEFAULT_PRESET})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse `bench run|report ...` or `leaderboard submit ...` and run it; the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    key = tuple(argv[:2])
    if key not in HANDLERS:
        group = [k for k in COMMANDS if k[0] == argv[0]] if argv else []
        asked = any(flag in argv[:2] for flag in ("-h", "--help"))
        if group and len(argv) > 1 and not asked:
            print(f"gameon {argv[0]}: unknown command {argv[1]!r}", file=sys.stderr)
        print(usage(group or None), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    cls, handler = HANDLERS[key]
    name = " ".join(key)
    try:
        command = tyro.cli(cls, args=argv[2:], prog=f"gameon {name}")
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        return handler(command)
    except ValueError as error:
        print(f"gameon {name}: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        line = write_failure_line(error)
        if line is None:
            raise
        print(f"gameon {name}: {line}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as error:
        line = missing_extra(name, error)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
