"""The report's statistics on known inputs, and the report of a results directory with a valid,
an invalid and a missing run record."""

from __future__ import annotations

import json
import math
import shutil
import warnings

import numpy as np
import pytest
from record_factory import ENV_ID, make_record, write_run
from scipy.stats import mannwhitneyu

from gameon.benchmark import report
from gameon.benchmark.commands import main as commands_main
from gameon.benchmark.report import write_report
from gameon.benchmark.stats import (
    iqm,
    iqm_ci,
    normalised_entropy,
    probability_of_improvement,
)
from gameon.records import Collected, TargetEvaluation, VLMUsage, write_record

SAMPLE = [0.9, 0.0, 0.3, 0.1, 0.6, 0.2, 0.5, 0.4]
"""Sorted: 0.0 0.1 | 0.2 0.3 0.4 0.5 | 0.6 0.9; the IQM is the mean of the middle four, 0.35."""


def test_steps_per_second_is_env_steps_over_wall_time_for_every_protocol() -> None:
    """An online record's own rate leaves its evaluations out; the report's column does not."""
    records = [
        make_record(seed, [True]).model_copy(update={"steps_per_second": 1254.0})
        for seed in range(3)
    ]
    (group,) = report.summarise(records)
    assert group["steps_per_second_mean"] == 500 / 10.0


def test_iqm_is_the_mean_of_the_middle_half() -> None:
    assert iqm(SAMPLE) == pytest.approx(0.35)
    assert iqm([1.0, 2.0, 3.0, 4.0]) == pytest.approx(2.5)
    assert iqm([0.0, 0.0, 0.0, 100.0]) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        iqm([])


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_iqm_refuses_a_non_finite_value_as_iqm_ci_does(bad) -> None:
    """Unchecked, trim_mean gives nan for a NaN and trims an inf away as if it were a number."""
    with pytest.raises(ValueError, match="finite"):
        iqm([0.1, bad, 0.2, 0.3])


def test_bootstrap_interval_contains_the_estimate_and_narrows_with_more_runs() -> None:
    small = iqm_ci([SAMPLE])
    large = iqm_ci([SAMPLE * 8])
    assert small.value == large.value == pytest.approx(0.35)
    for estimate in (small, large):
        assert estimate.low <= estimate.value <= estimate.high
        assert 0.0 <= estimate.low < estimate.high <= 0.9
    assert large.high - large.low < 0.6 * (small.high - small.low)


def test_bootstrap_is_seeded() -> None:
    sample = np.random.default_rng(0).uniform(size=30).tolist()
    assert iqm_ci([sample], seed=3) == iqm_ci([sample], seed=3)
    assert iqm_ci([sample], seed=3) != iqm_ci([sample], seed=4)


def test_bootstrap_resamples_within_strata() -> None:
    # Each stratum keeps its size, so two all-equal strata pool to the same sample every time;
    # an unstratified bootstrap of the pooled eight values would vary.
    estimate = iqm_ci([[0.0] * 4, [1.0] * 4])
    assert (estimate.value, estimate.low, estimate.high) == (0.5, 0.5, 0.5)
    mixed = iqm_ci([[0.0, 0.0, 0.0, 0.0], [0.2, 0.4, 0.6, 0.8]])
    assert mixed.low <= mixed.value <= mixed.high and mixed.low < mixed.high


def test_degenerate_samples_collapse_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert iqm_ci([[0.4]]).to_dict() == {"value": 0.4, "low": 0.4, "high": 0.4}
        equal = iqm_ci([[0.7, 0.7, 0.7]])
        assert equal.value == pytest.approx(0.7) and equal.low == equal.value == equal.high
        single = iqm_ci([[0.2], [0.4, 0.8]])
        assert single.low <= single.value <= single.high
        assert probability_of_improvement([[1.0]], [[0.0]]).to_dict() == {
            "value": 1.0,
            "low": 1.0,
            "high": 1.0,
        }


@pytest.mark.parametrize("bad", [[], [[]], [0.1, 0.2], np.array([0.1, 0.2]), [[0.1, math.nan]]])
def test_bad_samples_are_refused_naming_the_form(bad) -> None:
    with pytest.raises(ValueError, match="strat"):
        iqm_ci(bad)


def test_probability_of_improvement_on_known_inputs() -> None:
    assert probability_of_improvement([[1, 2, 3]], [[0, 0, 0]]).value == 1.0
    assert probability_of_improvement([[0, 0, 0]], [[1, 2, 3]]).value == 0.0
    assert probability_of_improvement([[0.5, 0.5]], [[0.5, 0.5]]).value == 0.5
    x, y = [0.6, 0.7, 0.8], [0.1, 0.2, 0.7]
    known = probability_of_improvement([x], [y])
    assert known.value == pytest.approx(7.5 / 9)
    assert known.value == pytest.approx(mannwhitneyu(x, y).statistic / 9)
    assert known.low <= known.value <= known.high <= 1.0
    averaged = probability_of_improvement([[1.0, 0.9], [0.0, 0.1]], [[0.0, 0.1], [1.0, 0.9]])
    assert averaged.value == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement([[1.0]], [[0.0], [1.0]])


def test_normalised_entropy_on_known_counts() -> None:
    assert normalised_entropy({"a": 5, "b": 5}) == pytest.approx(1.0)
    assert normalised_entropy({"a": 10}, ["a", "b", "c", "d"]) == 0.0
    assert normalised_entropy({"a": 1, "b": 1}, ["a", "b", "c", "d"]) == pytest.approx(0.5)
    expected = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)) / math.log(3)
    assert normalised_entropy({"a": 2, "b": 1, "c": 1}) == pytest.approx(expected)
    assert normalised_entropy({}) == 0.0
    with pytest.raises(ValueError, match="outside the given"):
        normalised_entropy({"z": 1}, ["a", "b"])


FIXED = [[True, False, False, False], [False] * 4, [True, True, False, False]]
VLM = [[True, True, True, False], [True, True, False, False], [True] * 4]


def test_report_of_a_directory_with_valid_invalid_and_missing_records(tmp_path, capsys) -> None:
    results = tmp_path / "results"
    collected = Collected(episodes=4, skills={"reach": 2, "lift": 2}, objects={"red": 4})
    vlm = VLMUsage(backend="rules", calls=6, prompt_tokens=100, completion_tokens=20)
    for seed, successes in enumerate(FIXED):
        write_run(results, make_record(seed, successes, collected=collected))
    for seed, successes in enumerate(VLM):
        record = make_record(seed, successes, "vlm", "vlm[rules]", collected=collected, vlm=vlm)
        write_run(results, record)
    (results / "broken").mkdir()
    (results / "broken" / "record.json").write_text('{"format": "gameon-run-record-v1"}')
    (results / "unfinished").mkdir()

    paths = write_report(results)

    assert paths.markdown == results / "report.md" and paths.json == results / "report.json"
    summary = json.loads(paths.json.read_text())
    groups = {g["curriculum_label"]: g for g in summary["groups"]}
    assert set(groups) == {"fixed", "vlm[rules]"}
    fixed, rules = groups["fixed"], groups["vlm[rules]"]
    assert fixed["seeds"] == [0, 1, 2] and fixed["target_success_per_run"] == [0.25, 0.0, 0.5]
    assert fixed["target_success"]["value"] == pytest.approx(0.25)
    assert rules["target_success"]["value"] == pytest.approx(0.75)
    assert fixed["improvement_over_fixed"] is None
    assert rules["improvement_over_fixed"]["value"] == pytest.approx(8.5 / 9)
    assert rules["per_skill_iqm"] == {"reach": pytest.approx(0.75)}
    assert fixed["suite_success_per_run"] == fixed["target_success_per_run"]  # Reach: one skill
    assert rules["suite_success"]["value"] == pytest.approx(0.75)
    assert rules["suite_improvement_over_fixed"] == rules["improvement_over_fixed"]
    assert rules["diversity"]["skills_entropy"] == pytest.approx(math.log(2) / math.log(7))
    assert rules["diversity"]["objects_entropy"] == 0.0
    assert rules["vlm"]["per_run"]["calls"] == 6 and rules["vlm"]["total"]["calls"] == 18
    assert rules["wall_seconds_mean"] == 10.0 and rules["steps_per_second_mean"] == 50.0

    skipped = {s["path"].split("/")[-1]: s["reason"] for s in summary["skipped"]}
    assert "not a valid run record" in skipped["broken"]
    assert "no record.json" in skipped["unfinished"]
    capsys.readouterr()
    assert commands_main(["bench", "report", str(results)]) == 0
    out = capsys.readouterr().out  # the terminal hears of the skipped folders too
    assert "skipped 2 run folders (listed in the table):" in out
    assert f"  {results / 'unfinished'}: " in out and f"  {results / 'broken'}: " in out

    markdown = paths.markdown.read_text()
    assert "| collect | GameOn/Reach-v0 | vlm[rules] | bc | 3 (0, 1, 2) | 0.75 [" in markdown
    assert "broken" in markdown and "unfinished" in markdown
    assert len(paths.plots) == 2
    for plot in paths.plots:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({plot.name})" in markdown


def test_report_writes_to_out_dir(tmp_path) -> None:
    write_run(tmp_path / "runs", make_record(0, FIXED[0]))
    paths = write_report(tmp_path / "runs", tmp_path / "out")
    assert paths.markdown.parent == tmp_path / "out" and len(paths.plots) == 2
    assert not (tmp_path / "runs" / "report.md").exists()


def test_ctrl_c_after_report_json_still_writes_the_markdown_of_that_report(
    tmp_path, monkeypatch
) -> None:
    """A report.md left from an earlier report beside a new report.json would contradict it."""
    import signal

    real = report.atomic_write

    def write_then_interrupt(path, data):
        written = real(path, data)
        if path.name == "report.json":
            signal.raise_signal(signal.SIGINT)
        return written

    write_run(tmp_path / "runs", make_record(0, FIXED[0]))
    monkeypatch.setattr(report, "atomic_write", write_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_report(tmp_path / "runs")
    generated = json.loads((tmp_path / "runs" / "report.json").read_text())["generated"]
    assert f"generated {generated}." in (tmp_path / "runs" / "report.md").read_text()


def test_vlm_runs_whose_model_never_answered_are_named_in_the_report(tmp_path) -> None:
    """Their practice was learning progress's: the report says so beside their row."""
    results = tmp_path / "results"
    answered = VLMUsage(backend="gemini", calls=6, used_answers=5)
    unanswered = VLMUsage(backend="gemini", fallbacks=9)
    invalid = VLMUsage(backend="gemini", calls=27, fallbacks=9, used_answers=0)
    for seed, successes in enumerate(VLM):
        vlm = (unanswered, invalid, answered)[seed]
        write_run(results, make_record(seed, successes, "vlm", "vlm[gemini]", vlm=vlm))
    paths = write_report(results)
    (group,) = json.loads(paths.json.read_text())["groups"]
    assert group["vlm"]["unanswered_runs"] == 2
    assert (
        "- **VLM never answered**: in 2 of 3 runs of vlm[gemini] (collect, bc, GameOn/Reach-v0) "
        "no answer of the model was used (none came, or none was valid), so all their practice "
        "was learning progress's choice, not the model's (the leaderboard refuses such runs)."
    ) in paths.markdown.read_text()


def test_vlm_runs_that_fell_back_for_some_consultations_are_named_in_the_report(
    tmp_path,
) -> None:
    """The leaderboard showed '12 of 38' fallbacks, the report nothing at all."""
    results = tmp_path / "results"
    partly = VLMUsage(backend="gemini", calls=30, used_answers=20, fallbacks=4)
    clean = VLMUsage(backend="gemini", calls=6, used_answers=5)
    for seed, successes in enumerate(VLM):
        vlm = (partly, partly, clean)[seed]
        write_run(results, make_record(seed, successes, "vlm", "vlm[gemini]", vlm=vlm))
    text = write_report(results).markdown.read_text()
    assert (
        "- **VLM fell back**: in 2 of 3 runs of vlm[gemini] (collect, bc, GameOn/Reach-v0) that "
        "the model did answer, 8 consultations fell back to learning progress"
    ) in text


def test_a_run_copied_into_other_folders_is_counted_once(tmp_path, capsys) -> None:
    """Copies of one run folder are one seed, not several: the folder named after the run is
    counted and the copies are listed as skipped, whatever order their names sort in."""
    results = tmp_path / "results"
    folders = [write_run(results, make_record(seed, FIXED[seed])) for seed in range(3)]
    for copy in ("a_backup", "zz_copy"):
        shutil.copytree(folders[0], results / copy)

    paths = write_report(results)

    (group,) = json.loads(paths.json.read_text())["groups"]
    assert group["seeds"] == [0, 1, 2] and group["target_success_per_run"] == [0.25, 0.0, 0.5]
    reason = f"same run as {folders[0]} (run id {folders[0].name}): counted once"
    assert {s.path: s.reason for s in paths.skipped} == {
        str(results / "a_backup"): reason,
        str(results / "zz_copy"): reason,
    }
    assert "| 3 (0, 1, 2) |" in paths.markdown.read_text()
    assert f"- `{results / 'zz_copy'}`: {reason}" in paths.markdown.read_text()
    assert commands_main(["bench", "report", str(results)]) == 0
    assert f"  {results / 'a_backup'}: {reason}" in capsys.readouterr().out


def test_a_seed_run_again_into_the_results_is_counted_once(tmp_path) -> None:
    """A second run of seed 0 (`gameon experiment --run-dir results/again`) was pooled as a
    third seed: "3 (0, 0, 0)" in the report."""
    results = tmp_path / "results"
    folders = [write_run(results, make_record(seed, FIXED[seed])) for seed in range(2)]
    runs = [{"run_id": folder.name} for folder in folders]
    (results / "matrix.json").write_text(json.dumps({"name": "m", "runs": runs}))
    again = make_record(0, FIXED[0])
    write_record(results / "again" / "record.json", again.model_copy(update={"run_id": "again"}))

    paths = write_report(results)

    (group,) = json.loads(paths.json.read_text())["groups"]
    assert group["seeds"] == [0, 1]
    assert {s.path: s.reason for s in paths.skipped} == {
        str(results / "again"): f"seed 0 of fixed (collect, bc, {ENV_ID}) again with the same "
        f"weights, after {folders[0]}: each seed is counted once"
    }


@pytest.mark.parametrize("out", ["a_file", "a_file/below", "report.md", "out/summary.JSON"])
def test_an_out_that_is_not_a_folder_is_refused_in_one_line(tmp_path, capsys, out) -> None:
    """--out is the report's folder: a file, a path below one or a file name is refused with
    exit 2 and one line naming it, and nothing is written."""
    results = tmp_path / "results"
    write_run(results, make_record(0, FIXED[0]))
    (tmp_path / "a_file").write_text("mine\n")
    before = sorted(tmp_path.rglob("*"))
    assert commands_main(["bench", "report", str(results), "--out", str(tmp_path / out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("gameon bench report: ") and str(tmp_path / out) in captured.err
    assert "folder" in captured.err
    assert sorted(tmp_path.rglob("*")) == before
    assert (tmp_path / "a_file").read_text() == "mine\n"


def test_an_existing_folder_named_like_a_file_is_a_valid_out(tmp_path) -> None:
    write_run(tmp_path / "runs", make_record(0, FIXED[0]))
    (tmp_path / "reports.md").mkdir()
    assert (
        commands_main(
            ["bench", "report", str(tmp_path / "runs"), "--out", str(tmp_path / "reports.md")]
        )
        == 0
    )
    assert (tmp_path / "reports.md" / "report.md").is_file()


def test_a_directory_without_valid_records_is_refused_and_nothing_written(tmp_path) -> None:
    (tmp_path / "runs").mkdir()
    with pytest.raises(ValueError, match="no run records in .*runs: nothing to report"):
        write_report(tmp_path / "runs")
    (tmp_path / "runs" / "broken").mkdir()
    (tmp_path / "runs" / "broken" / "record.json").write_text("{}")
    with pytest.raises(
        ValueError, match="no valid run records .*1 run folder skipped, e.g. broken"
    ):
        write_report(tmp_path / "runs")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["broken"]
    with pytest.raises(ValueError, match="not a directory"):
        write_report(tmp_path / "absent")


def test_one_run_s_folder_given_as_the_results_folder_names_the_results_folder(tmp_path) -> None:
    run = write_run(tmp_path / "results", make_record(0, FIXED[0], "fixed"))
    (tmp_path / "results" / "matrix.json").write_text("{}")
    with pytest.raises(
        ValueError, match=f"is one run's folder .* \\(here {tmp_path / 'results'}\\)"
    ):
        write_report(run)


def test_a_gameon_experiment_folder_is_not_sent_to_its_parent_as_a_results_folder(
    tmp_path,
) -> None:
    """Its parent (the current folder, say) holds no matrix: "(here .)" sent the user there."""
    run = write_run(tmp_path / "anywhere", make_record(0, FIXED[0], "fixed"))
    with pytest.raises(ValueError) as error:
        write_report(run)
    assert str(error.value).endswith("the --results directory of `gameon bench run`")


@pytest.mark.parametrize("folder", ["empty", "absent"])
def test_bench_report_of_no_records_exits_2_in_one_line(tmp_path, capsys, folder) -> None:
    results = tmp_path / folder
    if folder == "empty":
        results.mkdir()
    assert commands_main(["bench", "report", str(results)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("gameon bench report: no ") and str(results) in captured.err
    assert list(tmp_path.rglob("*")) == ([results] if folder == "empty" else [])


def report_of(tmp_path, groups: dict[str, list[list[bool]]], matrix: str | None = None) -> str:
    """The Markdown report of hand-made Reach-v0 runs, `groups`: curriculum -> each seed's
    episode outcomes; `matrix`: the matrix name matrix.json gives, if any."""
    results = tmp_path / "results"
    for curriculum, runs in groups.items():
        for seed, successes in enumerate(runs):
            write_run(results, make_record(seed, successes, curriculum))
    if matrix is not None:
        (results / "matrix.json").write_text(json.dumps({"name": matrix, "description": "d"}))
    return write_report(results).markdown.read_text()


def test_intervals_from_fewer_than_three_seeds_are_not_shown(tmp_path) -> None:
    markdown = report_of(tmp_path, {"fixed": FIXED[:2], "lp": VLM[:1]})
    assert (
        "| collect | GameOn/Reach-v0 | fixed | bc | 2 (0, 1) | 0.12 [n/a (2 seeds)] |" in markdown
    )
    lp = next(line for line in markdown.splitlines() if line.startswith("| collect | GameOn/R"))
    lp = next(line for line in markdown.splitlines() if "| lp |" in line)
    assert lp.startswith("| collect | GameOn/Reach-v0 | lp | bc | 1 (0) | 0.75 [n/a (1 seed)] |")
    assert lp.count("[n/a (1 seed)]") == 4  # target, all skills, P(> fixed) twice
    summary = json.loads((tmp_path / "results" / "report.json").read_text())
    groups = {g["curriculum"]: g for g in summary["groups"]}
    assert set(groups["lp"]["target_success"]) == {"value", "low", "high"}
    assert set(groups["lp"]["improvement_over_fixed"]) == {"value", "low", "high"}


@pytest.mark.parametrize("matrix", ["paper", "smoke"])
def test_three_seeds_show_intervals_and_no_pipeline_banner(tmp_path, matrix) -> None:
    """A copy of the smoke preset kept its name with 3 seeds and real budgets, and its report
    said it was the smoke preset's pipeline check that ranks nothing."""
    markdown = report_of(tmp_path, {"fixed": FIXED, "lp": VLM}, matrix=matrix)
    assert "[n/a" not in markdown and "Pipeline check" not in markdown
    assert "| 3 (0, 1, 2) | 0.75 [" in markdown


@pytest.mark.parametrize(
    ("matrix", "seeds", "why"),
    [("smoke", 1, "This is the smoke preset"), (None, 2, "Every row has fewer than 3 seeds")],
)
def test_a_pipeline_check_says_so_under_its_heading(tmp_path, matrix, seeds, why) -> None:
    markdown = report_of(tmp_path, {"fixed": FIXED[:seeds], "lp": VLM[:seeds]}, matrix=matrix)
    banner = markdown.splitlines()[2]
    assert banner.startswith("> **Pipeline check: these numbers rank nothing.** " + why)


def test_every_column_of_every_table_is_explained_under_it(tmp_path) -> None:
    markdown = report_of(tmp_path, {"fixed": FIXED, "lp": VLM})
    lines = markdown.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| protocol |"))
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    legend = lines[lines.index("Columns:", header) :]
    explained = [line.split("**")[1] for line in legend if line.startswith("- **")]
    assert explained[: len(columns)] == columns
    assert "`5 (0, 1, 2, 3, 4)` is five runs with seeds 0 to 4" in markdown


def test_coinciding_curves_keep_distinct_markers_styles_and_offsets(tmp_path, monkeypatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    figures = []
    monkeypatch.setattr(report, "_save", lambda figure, path: figures.append(figure) or path)
    same = {label: [make_record(0, [False] * 4, label)] for label in ("fixed", "hand", "lp")}
    report._plot_curves(same, "title", tmp_path / "curves.png")
    lines = figures[0].axes[0].get_lines()
    assert len({line.get_marker() for line in lines}) == 3
    assert len({line.get_linestyle() for line in lines}) == 3
    starts = [line.get_xdata()[0] for line in lines]
    assert len(set(starts)) == 3 and max(starts) - min(starts) <= 0.2 * 2


def test_across_envs_stratifies_by_env(tmp_path) -> None:
    results = tmp_path / "results"
    for env_id, fixed, lp in (
        ("GameOn/Reach-v0", [0.0, 0.25, 0.5], [0.5, 0.75, 1.0]),
        ("GameOn/Lift-v0", [0.0, 0.0, 0.25], [0.25, 0.25, 0.5]),
    ):
        for curriculum, rates in (("fixed", fixed), ("lp", lp)):
            for seed, rate in enumerate(rates):
                successes = [i < rate * 4 for i in range(4)]
                write_run(results, make_record(seed, successes, curriculum, env_id=env_id))
    summary = json.loads(write_report(results).json.read_text())
    rows = {row["curriculum_label"]: row for row in summary["across_envs"]}
    assert rows["lp"]["envs"] == ["GameOn/Lift-v0", "GameOn/Reach-v0"]
    assert rows["lp"]["target_success"]["value"] == pytest.approx(
        iqm([0.5, 0.75, 1.0, 0.25, 0.25, 0.5])
    )
    expected = (8.5 / 9 + 8 / 9) / 2  # Reach: 8.5 of 9 pairs won (a tie is half); Lift: 8
    assert rows["lp"]["improvement_over_fixed"]["value"] == pytest.approx(expected)
    assert rows["fixed"]["improvement_over_fixed"] is None
    assert "## Across envs" in (results / "report.md").read_text()
    assert len(summary["plots"]) == 4


def test_plots_draw_no_interval_where_fewer_than_three_seeds_stand_behind_it(
    tmp_path, monkeypatch
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    figures = []
    monkeypatch.setattr(report, "_save", lambda figure, path: figures.append(figure) or path)
    by_label = {
        "fixed": [make_record(seed, FIXED[seed], "fixed") for seed in (0, 1)],
        "lp": [make_record(seed, VLM[seed], "lp") for seed in (0, 1, 2)],
    }
    report._plot_curves(by_label, "title", tmp_path / "curves.png")
    report._plot_final(by_label, "title", tmp_path / "final.png")
    curves, final = (figure.axes[0] for figure in figures)
    assert len(curves.collections) == 1, "a band for lp's 3 seeds, none for fixed's 2"
    assert [t.get_text() for t in curves.get_legend().get_texts()] == [
        "fixed (2 seeds, no CI)",
        "lp (3 seeds)",
    ]
    whiskers = [
        segment[0][0]
        for container in final.containers
        if type(container).__name__ == "ErrorbarContainer"
        for segment in container.lines[2][0].get_segments()
    ]
    assert len(whiskers) == 2 and all(x > 0.5 for x in whiskers), "only lp's 2 bars (3 seeds)"


def test_the_target_table_names_each_row_s_protocol_and_env(tmp_path) -> None:
    results = tmp_path / "results"
    for env_id in ("GameOn/Reach-v0", "GameOn/Lift-v0"):
        for seed in range(3):
            record = make_record(seed, [True, False] * 2, env_id=env_id)
            composed = TargetEvaluation(mode="composed", evaluation=record.evaluation)
            write_run(results, record.model_copy(update={"target_evaluations": [composed]}))
    markdown = write_report(results).markdown.read_text()
    table = markdown.split("## Final target evaluations")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| collect |")]
    assert [row.split(" | ")[1] for row in rows] == ["GameOn/Lift-v0", "GameOn/Reach-v0"]
    assert "- **protocol, env, curriculum, learner**" in table


def test_a_failed_run_is_skipped_with_its_error(tmp_path) -> None:
    """The reason is error.txt's last line (the exception's): an older worker's error.txt began
    with "<run_id> failed:", which said nothing."""
    results = tmp_path / "results"
    for seed in range(3):
        write_run(results, make_record(seed, FIXED[seed]))
    (results / "crashed").mkdir()
    (results / "crashed" / "error.txt").write_text(
        "crashed failed:\nTraceback (most recent call last):\n  ...\nRuntimeError: boom\n\n"
    )
    summary = json.loads(write_report(results).json.read_text())
    (skipped,) = summary["skipped"]
    assert skipped["reason"].startswith("failed: RuntimeError: boom (see ")


NONE, ONE_IN_FOUR, ALL = [False] * 4, [True, False, False, False], [True] * 4


def comparison_line(markdown: str, label: str) -> str:
    section = markdown.split("## Comparisons with fixed", 1)[1].split("\n## ", 1)[0]
    return next(line for line in section.splitlines() if f"bc: {label} " in line)


def test_a_curriculum_is_called_better_or_worse_only_where_the_intervals_do_not_overlap(
    tmp_path,
) -> None:
    """As in the paper preset: fixed succeeds a little in three of five seeds, hand never.
    P(> fixed)'s interval then lies below 0.50, but the target intervals overlap; the report
    calls that no difference rather than hand worse."""
    markdown = report_of(
        tmp_path,
        {
            "fixed": [ONE_IN_FOUR, NONE, ONE_IN_FOUR, NONE, ONE_IN_FOUR],
            "hand": [NONE] * 5,
            "lp": [ALL] * 5,
        },
    )
    summary = json.loads((tmp_path / "results" / "report.json").read_text())
    hand = next(g for g in summary["groups"] if g["curriculum"] == "hand")
    assert hand["improvement_over_fixed"]["high"] < 0.5  # the bootstrap alone would say worse
    assert comparison_line(markdown, "hand").endswith(
        "hand 0.00 [0.00, 0.00] vs fixed 0.17 [0.00, 0.25], P(> fixed) 0.20 [0.00, 0.40]: "
        "no difference shown (the intervals overlap)."
    )
    assert comparison_line(markdown, "lp").endswith(
        "better than fixed (the intervals do not overlap)."
    )


def test_comparisons_are_not_judged_below_three_seeds_nor_ranked_without_controls(
    tmp_path,
) -> None:
    few = report_of(tmp_path / "few", {"fixed": [NONE] * 2, "lp": [ALL] * 3})
    assert comparison_line(few, "lp").endswith("not judged: no intervals with 2 seeds.")
    blind = report_of(
        tmp_path / "blind",
        {
            "fixed": [NONE] * 3,
            "lp": [ALL] * 3,
            "positive_control": [NONE] * 3,
            "negative_control": [ALL] * 3,
        },
    )
    assert comparison_line(blind, "lp").endswith(
        "better than fixed (the intervals do not overlap); but the controls did not separate "
        "here, so this ranks nothing."
    )
    assert "REVERSED (the negative control scores higher): this comparison is blind" in blind


def test_the_report_says_what_its_iqm_is_with_few_seeds_and_how_bands_are_resampled(
    tmp_path,
) -> None:
    """trim_mean(0.25) cuts nothing of 3 runs and one of each end of 5: "the mean of the middle
    50%" would promise a robustness that 3 or 5 seeds do not have."""
    assert iqm([0.0, 0.0, 0.9]) == pytest.approx(0.3)
    assert iqm([0.0, 0.1, 0.2, 0.3, 0.9]) == pytest.approx(0.2)
    markdown = report_of(tmp_path, {"fixed": FIXED})
    assert "middle 50%" not in markdown
    assert "the plain mean of 1 to 3 seeds and the mean of the middle 3 of 5" in markdown
    assert "2000 resamples, seed 0; the curves' bands 500" in markdown


def test_the_practised_plot_titles_each_panel_with_its_seed_count(tmp_path, monkeypatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    figures = []
    monkeypatch.setattr(report, "_save", lambda figure, path: figures.append(figure) or path)
    records = []
    for label, seeds in (("fixed", 1), ("lp", 3)):
        for seed in range(seeds):
            record = make_record(seed, FIXED[seed], label)
            record.extra["iterations"] = [{"practised": {}}, {"practised": {"reach": 2}}]
            records.append(record)
    report.write_plots(records, tmp_path)
    practised = figures[-1]
    assert [axis.get_title() for axis in practised.axes] == ["fixed (1 seed)", "lp (3 seeds)"]


def test_the_practised_plot_s_title_fits_a_single_panel(tmp_path, monkeypatch) -> None:
    """One curriculum makes a narrow figure: its title was cut off at both edges."""
    import matplotlib

    matplotlib.use("Agg")
    figures = []
    monkeypatch.setattr(report, "_save", lambda figure, path: figures.append(figure) or path)
    record = make_record(0, FIXED[0], "fixed")
    record.extra["iterations"] = [{"practised": {"reach": 1}}, {"practised": {"reach": 2}}]
    report.write_plots([record], tmp_path)
    practised = figures[-1]
    practised.tight_layout()
    renderer = practised.canvas.get_renderer()
    title = practised._suptitle.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= practised.bbox.width


def test_a_report_of_part_of_the_matrix_says_which_runs_have_no_record(tmp_path, capsys) -> None:
    """An interrupted matrix, or one run with --only, reported as if it were whole, read as fewer
    seeds than the matrix has."""
    results = tmp_path / "results"
    records = [make_record(seed, FIXED[seed]) for seed in range(3)]
    write_run(results, records[0])
    runs = [{"run_id": record.run_id} for record in records]
    (results / "matrix.json").write_text(json.dumps({"name": "m", "runs": runs}))
    markdown = write_report(results).markdown.read_text()
    assert (
        f"**Part of the matrix:** 2 of its runs have no record (e.g. `{records[1].run_id}`"
    ) in markdown
    assert commands_main(["bench", "report", str(results)]) == 0
    assert f"part of the matrix: 2 of its runs have no record (e.g. {records[1].run_id})" in (
        capsys.readouterr().out
    )
    for record in records[1:]:
        write_run(results, record)
    assert "Part of the matrix" not in write_report(results).markdown.read_text()


def test_an_out_holding_another_matrix_s_results_is_refused(tmp_path, capsys) -> None:
    """Its own report.md would have been replaced by this one, under its own matrix.json."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    write_run(mine, make_record(0, FIXED[0]))
    write_run(theirs, make_record(1, FIXED[1]))
    (theirs / "matrix.json").write_text(json.dumps({"name": "theirs", "runs": []}))
    (theirs / "report.md").write_text("their report\n")
    assert commands_main(["bench", "report", str(mine), "--out", str(theirs)]) == 2
    assert "holds another matrix's results (matrix.json)" in capsys.readouterr().err
    assert (theirs / "report.md").read_text() == "their report\n"
    assert commands_main(["bench", "report", str(theirs), "--out", str(theirs)]) == 0


def test_a_group_whose_runs_trained_on_different_budgets_says_so(tmp_path) -> None:
    """A run extended outside its matrix, or two matrices' records in one folder, were pooled into
    one row without a word."""
    results = tmp_path / "results"
    records = [make_record(seed, FIXED[seed]) for seed in range(3)]
    longer = records[2].model_copy(update={"budget": {**records[2].budget, "iterations": 9}})
    for record in [*records[:2], longer]:
        write_run(results, record)
    markdown = write_report(results).markdown.read_text()
    line = next(line for line in markdown.splitlines() if "**Budgets differ**" in line)
    assert "the 3 runs of fixed (collect" in line and "trained on 2 budgets (" in line
    assert "(iterations 2; iterations 9)" in line
    write_run(results, records[2])
    assert "Budgets differ" not in write_report(results).markdown.read_text()


def test_a_run_that_ended_early_is_held_not_cut_from_the_curves(tmp_path, monkeypatch) -> None:
    """auto_stop ends a run once it masters its target, and the curves and the practised panels
    were cut to that shortest run: the curriculum that succeeded lost its later iterations while
    the legend still counted every seed."""
    import matplotlib

    from gameon.records import CurvePoint

    matplotlib.use("Agg")
    records = []
    for seed in range(3):
        record = make_record(seed, FIXED[seed], "lp")
        rates = [0.0, 0.5, 0.6, 0.7] if seed else [0.0, 1.0]
        record.curve = [
            CurvePoint(step=step, success_rate=rate, per_skill={"reach": rate})
            for step, rate in enumerate(rates)
        ]
        record.extra["iterations"] = [{"practised": {"reach": 1}}] * len(rates)
        records.append(record)
    steps, value, _, _ = report.curve_band(records)
    assert steps.tolist() == [0, 1, 2, 3]
    assert value[-1] == pytest.approx(np.mean([0.7, 0.7, 1.0]))  # the stopped run held at 1.0
    assert len(report.practised(records)) == 3

    figures = []
    monkeypatch.setattr(report, "_save", lambda figure, path: figures.append(figure) or path)
    report.write_plots(records, tmp_path)
    legend = [text.get_text() for text in figures[0].axes[0].get_legend().get_texts()]
    assert [text.replace("\n", " ") for text in legend] == [
        "lp (3 seeds; 1 ended early, held at its last value)"
    ]


def test_intervals_of_width_zero_do_not_call_a_difference_chance_explains(tmp_path) -> None:
    """Every seed of hand won 1 of 20 target episodes and every seed of fixed none: the
    bootstrap intervals collapsed to [0.05, 0.05] and [0.00, 0.00], and the report called hand
    better than fixed (and the controls separated) on 3 of 60 episodes against 0 of 60."""
    one_of_twenty = [[True] + [False] * 19] * 3
    none = [[False] * 20] * 3
    markdown = report_of(
        tmp_path,
        {
            "fixed": none,
            "hand": one_of_twenty,
            "positive_control": one_of_twenty,
            "negative_control": none,
        },
    )
    chance = (
        "the intervals do not overlap, but 3 of 60 target episodes against 0 of 60 could be "
        "chance: Fisher's exact p = 0.12"
    )
    assert "hand 0.05 [0.05, 0.05] vs fixed 0.00 [0.00, 0.00]" in markdown
    assert f"no difference shown ({chance})" in markdown
    assert f"on the target: NOT separated ({chance}): this comparison is blind." in markdown
    assert "better than fixed" not in markdown

    half = [[True] * 10 + [False] * 10] * 3
    markdown = report_of(tmp_path / "clear", {"positive_control": half, "negative_control": none})
    assert "on the target: separated." in markdown


def test_long_vlm_labels_neither_overlap_nor_cover_the_curves(tmp_path, monkeypatch) -> None:
    """Labels of the form README gives (`vlm[openai:Qwen/Qwen2.5-VL-7B-Instruct]`) ran into each
    other under the bars and over each other above the practised panels, and the curves' legend
    covered the data."""
    import matplotlib

    matplotlib.use("Agg")
    figures = []
    monkeypatch.setattr(report, "_save", lambda figure, path: figures.append(figure) or path)
    labels = ["fixed", "vlm[gemini:gemini-2.5-flash]", "vlm[openai:Qwen/Qwen2.5-VL-7B-Instruct]"]
    records = []
    for label in labels:
        for seed in range(3):
            record = make_record(seed, FIXED[seed], "vlm" if "[" in label else label, label)
            record.extra["iterations"] = [{"practised": {}}, {"practised": {"reach": 2}}]
            records.append(record)
    report.write_plots(records, tmp_path)
    curves, final, practised = figures

    def boxes(texts):  # noqa: ANN001, ANN202
        return [text.get_window_extent(renderer) for text in texts if text.get_text()]

    for figure in figures:
        figure.tight_layout()
    renderer = final.canvas.get_renderer()
    ticks = boxes(final.axes[0].get_xticklabels())
    assert len(ticks) == 3 and all(a.x1 < b.x0 for a, b in zip(ticks, ticks[1:], strict=False))
    renderer = practised.canvas.get_renderer()
    titles = boxes(axis.title for axis in practised.axes)
    assert len(titles) == 3 and all(a.x1 < b.x0 for a, b in zip(titles, titles[1:], strict=False))
    renderer = curves.canvas.get_renderer()
    legend = curves.axes[0].get_legend().get_window_extent(renderer)
    assert legend.x0 >= curves.axes[0].get_window_extent(renderer).x1


def test_odd_labels_and_descriptions_break_no_table_or_heading(tmp_path) -> None:
    """A line break in a matrix description put a stray heading into the report's title, one in
    a label split a comparison line, and raw HTML in a label reached the Markdown as HTML."""
    label = "vlm[x]\n## injected | <img src=x onerror=alert(1)>"
    results = tmp_path / "results"
    for seed, successes in enumerate(FIXED):
        write_run(results, make_record(seed, successes, "fixed"))
        write_run(results, make_record(seed, successes, "vlm", label))
    description = "d\n## injected heading | with pipe"
    (results / "matrix.json").write_text(json.dumps({"name": "m", "description": description}))
    markdown = write_report(results).markdown.read_text()
    assert markdown.splitlines()[0] == "# Benchmark report (m: d ## injected heading \\| with pipe)"
    assert not any(line.startswith("## injected") for line in markdown.splitlines())
    assert "<img" not in markdown
    assert "vlm[x] ## injected \\| &lt;img src=x onerror=alert(1)>" in markdown


def test_a_report_replacing_another_leaves_none_of_its_plots_and_is_no_run(tmp_path) -> None:
    """Reporting a second matrix into the same --out left the first one's plots (another
    learner's) beside the new report as if part of it; a report written with --out inside the
    results folder was listed as a skipped run folder ("no record.json") by every later report."""
    one, two = tmp_path / "one", tmp_path / "two"
    for seed, successes in enumerate(FIXED):
        write_run(one, make_record(seed, successes, "fixed"))
        write_run(one, make_record(seed, successes, "fixed", learner="iql"))
        write_run(two, make_record(seed, successes, "fixed"))
    out = tmp_path / "out"
    first = write_report(one, out).plots
    assert any("iql" in p.name for p in first)
    second = write_report(two, out).plots
    assert sorted(p.name for p in out.glob("*.png")) == sorted(p.name for p in second)

    write_report(one, one / "report_v2")
    paths = write_report(one)
    assert not paths.skipped


def test_a_fractional_mean_of_vlm_calls_is_not_rounded_to_a_whole_call(tmp_path) -> None:
    """The VLM calls column rounded the per-run mean: 4, 5 and 5 calls read as 5."""
    results = tmp_path / "results"
    for seed, (successes, calls) in enumerate(zip(VLM, (4, 5, 5), strict=True)):
        vlm = VLMUsage(backend="rules", calls=calls)
        write_run(results, make_record(seed, successes, "vlm", "vlm[rules]", vlm=vlm))
    row = next(
        line
        for line in write_report(results).markdown.read_text().splitlines()
        if line.startswith("| collect | GameOn/Reach-v0 | vlm[rules] ")
    )
    assert " | 4.7 | " in row
