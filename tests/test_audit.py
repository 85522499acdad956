"""Training is bitwise deterministic on the CPU with one thread; `leaderboard audit` re-trains
sampled runs of an entry from their records and marks the entry; a truncated dataset or
checkpoint found on a resume (of a collect run, or of an audit's re-run) is reported with its path
and the run re-done, never trained on."""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("minari")
pytest.importorskip("matplotlib")

from test_leaderboard import run_read_only  # noqa: E402

from gameon.benchmark.audit import (  # noqa: E402
    audit_entry,
    comparison_mode,
    find_entry,
    sample_runs,
    write_audit,
)
from gameon.benchmark.leaderboard import EntryAudit, RunAudit, read_board, submit  # noqa: E402
from gameon.experimenter.loop import LoopConfig, run_experiment  # noqa: E402
from gameon.integrity import (  # noqa: E402
    check_dataset,
    file_sha256,
    folder_sha256,
    weights_sha256,
)
from gameon.records import RunRecord  # noqa: E402

TINY = LoopConfig(
    env_id="GameOn/Reach-v0",
    practice_env_id="GameOn/Reach-v0",
    curriculum="fixed",
    iterations=1,
    episodes_per_iteration=2,
    seed_episodes=2,
    num_updates=20,
    eval_episodes_per_skill=1,
    target_eval_episodes=1,
    auto_stop=False,
)


def _hdf5(run_dir: Path) -> Path:
    return next((run_dir / "datasets").rglob("*.hdf5"))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# -- determinism --------------------------------------------------------------------------------


def test_bc_training_gives_byte_identical_checkpoints(tmp_path, monkeypatch) -> None:
    """Two BC runs of one seed on a tiny dataset: the checkpoint files hash the same (run from
    the same relative folder, since the file embeds its arguments' paths), and so do their
    weights wherever they ran."""
    from gameon.baselines import bc, datasets

    datasets.collect(
        datasets.Args(
            env_id="GameOn/Reach-v0",
            episodes_per_skill=2,
            dataset_id="gameon/tiny-v0",
            datasets_path=str(tmp_path / "data"),
            progress=False,
        )
    )
    files, weights = [], []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        (tmp_path / name / "data").symlink_to(tmp_path / "data")
        args = bc.Args(
            dataset_id="gameon/tiny-v0",
            datasets_path="data",
            num_updates=30,
            batch_size=32,
            hidden=(16,),
            eval_episodes_per_skill=1,
            seed=3,
            run_dir="run",
        )
        checkpoint = Path(bc.train(args)["checkpoint"]).resolve()
        files.append(file_sha256(checkpoint))
        weights.append(weights_sha256(checkpoint))
    assert files[0] == files[1] and weights[0] == weights[1]


def test_collect_training_gives_byte_identical_checkpoints_and_datasets(
    tmp_path, monkeypatch
) -> None:
    records = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        records.append(run_experiment(TINY, Path("run"), progress=False))
    first, second = records
    assert first.checkpoint_sha256 == second.checkpoint_sha256 is not None
    assert first.weights_sha256 == second.weights_sha256 is not None
    assert first.dataset_sha256 == second.dataset_sha256 is not None
    assert first.evaluation == second.evaluation
    assert file_sha256(tmp_path / "a" / "run" / first.checkpoint) == first.checkpoint_sha256


# -- bad files on resume ------------------------------------------------------------------------


def test_a_truncated_dataset_found_on_resume_is_reported_and_the_run_redone(
    tmp_path, capsys
) -> None:
    run_dir = tmp_path / "run"
    record = run_experiment(TINY, run_dir, progress=False)
    hdf5 = _hdf5(run_dir)
    _truncate(hdf5)
    truncated = hdf5.stat().st_size
    assert [bad.path for bad in check_dataset(hdf5.parents[2])] == [hdf5]

    again = run_experiment(TINY, run_dir, progress=False)

    err = capsys.readouterr().err
    assert f"bad file: {hdf5}: truncated or corrupted" in err
    assert "re-done from iteration 0, its last good commit" in err
    assert again.evaluation == record.evaluation
    assert again.weights_sha256 == record.weights_sha256
    assert again.dataset_sha256 == record.dataset_sha256
    (report,) = again.extra["bad_files"]
    assert report["files"][0]["path"] == str(hdf5) and report["redone_from_iteration"] == 0
    kept = run_dir / report["moved_to"]
    assert (kept / hdf5.relative_to(run_dir)).stat().st_size == truncated
    assert (kept / "state.json").is_file() and (kept / "record.json").is_file()
    assert folder_sha256(hdf5.parents[2]) != folder_sha256(
        kept / hdf5.parents[2].relative_to(run_dir)
    )


def test_a_truncated_checkpoint_found_on_resume_is_reported_and_the_run_redone(
    tmp_path, capsys
) -> None:
    """Also for a state committed before file hashes were kept: the checkpoint does not load."""
    run_dir = tmp_path / "run"
    record = run_experiment(TINY, run_dir, progress=False)
    state_path = run_dir / "state.json"
    state = json.loads(state_path.read_text())
    del state["files"]
    state_path.write_text(json.dumps(state))
    checkpoint = run_dir / record.checkpoint
    _truncate(checkpoint)

    again = run_experiment(TINY, run_dir, progress=False)

    err = capsys.readouterr().err
    assert f"bad file: {checkpoint}: not a readable checkpoint" in err
    assert again.weights_sha256 == record.weights_sha256
    assert again.extra["bad_files"][0]["files"][0]["path"] == str(checkpoint)
    assert file_sha256(checkpoint) == record.checkpoint_sha256


def test_an_unreadable_bad_files_log_neither_stops_the_run_nor_is_lost(tmp_path) -> None:
    """A damaged bad_files/report.json stopped every start of the run with a JSONDecodeError."""
    run_dir = tmp_path / "run"
    run_experiment(TINY, run_dir, progress=False)
    log = run_dir / "bad_files" / "report.json"
    log.parent.mkdir()
    log.write_text("{not json")
    again = run_experiment(TINY, run_dir, progress=False)
    assert again.extra["bad_files"] == [
        {"unreadable_log": "bad_files/report.json is not a list of reports"}
    ]
    _truncate(_hdf5(run_dir))
    redone = run_experiment(TINY, run_dir, progress=False)
    note, report = redone.extra["bad_files"]
    assert note["unreadable_log"].startswith("an unreadable log was moved to report.")
    assert (log.parent / note["unreadable_log"].split()[-1]).read_text() == "{not json"
    assert report["redone_from_iteration"] == 0


def test_a_run_resumed_under_another_setup_says_so_and_is_audited_by_tolerance(
    tmp_path, capsys, monkeypatch
) -> None:
    """Its record named only the last setup, and the audit called the comparison bitwise."""
    from gameon.benchmark.audit import comparison_mode
    from gameon.experimenter import loop

    run_dir = tmp_path / "run"
    first = run_experiment(TINY, run_dir, progress=False)
    assert "setups" not in first.extra and comparison_mode(first)[0] == "bitwise"
    setup = loop.run_setup()
    other = {**setup, "platform": {**setup["platform"], "torch_cpu": "AVX2"}}
    monkeypatch.setattr(loop, "run_setup", lambda: other)
    extended = run_experiment(
        replace(TINY, iterations=TINY.iterations + 1), run_dir, progress=False
    )
    assert "under another platform than it started with" in capsys.readouterr().err
    assert extended.extra["setups"] == [setup, other]
    mode, reasons = comparison_mode(extended)
    assert mode == "tolerance" and "resumed under 1 other setup(s)" in " ".join(reasons)


# -- the audit ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def entry(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A board with one entry of three tiny collect runs (seeds 0, 1, 2) and an audit folder."""
    root = tmp_path_factory.mktemp("audit")
    runs = []
    for seed in (0, 1, 2):
        run_dir = root / "runs" / f"collect__Reach__fixed__bc__s{seed}"
        run_experiment(replace(TINY, seed=seed), run_dir, progress=False)
        runs.append(run_dir)
    result = submit(runs, root / "board")
    assert result.accepted, result.reasons
    return root / "board", result.entry_id, root / "work"


def _board_copy(entry: tuple[Path, str, Path], tmp_path: Path) -> Path:
    board = tmp_path / "board"
    shutil.copytree(entry[0], board)
    return board


def _edit_record(board: Path, entry_id: str, seed: int, change) -> None:
    run = next(r for r in read_board(board).entries[0].runs if r.seed == seed)
    path = board / run.record
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def test_the_audit_reproduces_bitwise_and_marks_the_entry(entry, tmp_path) -> None:
    board_dir, entry_id, work = entry
    board = _board_copy(entry, tmp_path)
    before = read_board(board).entries[0]
    lines: list[str] = []

    audit = audit_entry(entry_id, 2, board, seed=0, work_root=work, say=lines.append)

    expected = sorted(random.Random(0).sample(range(3), 2))
    assert audit.sampled == [before.runs[i].run_id for i in expected]
    assert audit.audited and audit.runs == 2 and audit.sampling_seed == 0
    for result in audit.results:
        assert (result.outcome, result.comparison) == ("reproduced", "bitwise"), result.detail
        assert "the trained weights are identical" in result.detail
    after = read_board(board).entries[0]
    assert after.audits == [audit] and after.model_copy(update={"audits": []}) == before
    row = next(
        line for line in (board / "LEADERBOARD.md").read_text().splitlines() if entry_id in line
    )
    assert f"| yes (2/2, {audit.when[:10]}) |" in row
    text = "\n".join(lines)
    assert "sampled 2 with sampling seed 0" in text and "comparison: bitwise" in text
    assert "this audit: 2 of 2 sampled runs reproduced their claim" in text
    assert "audited yes (2 of 2 runs audited so far reproduced their claim)" in text


def _flip(record: dict) -> dict:
    """The record with its first evaluation episode's verdict doctored."""
    episode = record["evaluation"]["episodes"][0]
    episode["success"] = not episode["success"]
    episode["episode_return"] = float(episode["success"])
    return record


def test_the_audit_rejects_a_doctored_claim(entry, tmp_path) -> None:
    _, entry_id, work = entry
    board = _board_copy(entry, tmp_path)
    _edit_record(board, entry_id, 1, _flip)
    audit = audit_entry(entry_id, 3, board, work_root=work, say=lambda _: None)
    outcomes = {result.seed: result.outcome for result in audit.results}
    assert outcomes == {0: "reproduced", 1: "not reproduced", 2: "reproduced"}
    assert "1 of 3 episodes differ" in audit.results[1].detail
    assert not audit.audited
    assert "| no (2/3, " in (board / "LEADERBOARD.md").read_text()


def test_a_failed_audit_stays_on_record_when_the_entry_is_audited_again(
    entry, tmp_path, capsys
) -> None:
    """A later audit drawing a run that reproduces leaves the earlier failure on the board: the
    entry's verdict and its k of n are over every run ever audited, and the command exits 1."""
    from gameon.cli import main

    _, entry_id, work = entry
    board = _board_copy(entry, tmp_path)
    _edit_record(board, entry_id, 1, _flip)
    first = audit_entry(entry_id, 3, board, work_root=work, say=lambda _: None)
    entry_now = read_board(board).entries[0]
    seed = next(s for s in range(50) if sample_runs(entry_now, 1, s)[0].seed != 1)
    (drawn,) = sample_runs(entry_now, 1, seed)

    arguments = ["leaderboard", "audit", entry_id[:4], "--runs", "1", "--seed", str(seed)]
    with pytest.raises(SystemExit) as exit_info:
        main([*arguments, "--board", str(board), "--work", str(work)])

    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "-> reproduced" in out
    assert "this audit: 1 of 1 sampled runs reproduced their claim" in out
    assert (
        f"entry {entry_id}: audited no (2 of 3 runs audited so far reproduced their claim; "
        "collect__Reach__fixed__bc__s1: not reproduced)"
    ) in out
    audits = read_board(board).entries[0].audits
    assert len(audits) == 2 and audits[0] == first
    assert audits[1].sampled == [drawn.run_id] and not audits[1].audited
    assert audits[1].results[0].outcome == "reproduced"
    row = next(
        line for line in (board / "LEADERBOARD.md").read_text().splitlines() if entry_id in line
    )
    assert f"| no (2/3, {audits[1].when[:10]}) |" in row


def _audit_of(board: Path, day: int, outcomes: dict[int, str]) -> EntryAudit:
    """A hand-made audit of the entry's runs of the given seeds, with these outcomes."""
    runs = {run.seed: run for run in read_board(board).entries[0].runs}
    results = [
        RunAudit(run_id=runs[seed].run_id, seed=seed, outcome=outcome, detail="compared")
        for seed, outcome in outcomes.items()
    ]
    return EntryAudit(
        audited=True,
        when=f"2026-12-{day:02d}T00:00:00+00:00",
        runs=len(results),
        sampling_seed=day,
        sampled=[result.run_id for result in results],
        tolerance="bitwise",
        results=results,
    )


def test_the_verdict_is_over_every_audit_and_a_failure_is_never_undone(entry, tmp_path) -> None:
    """Every audit is kept. A run that failed to reproduce keeps the entry at no, even if it
    reproduces later; one that could not be audited counts until an audit compares it."""
    board = _board_copy(entry, tmp_path)
    steps = [  # (outcome by seed, the entry's verdict after it, the audited cell)
        ({0: "not audited"}, False, "no (0/1, 2026-12-01)"),
        ({0: "reproduced", 1: "within tolerance"}, True, "yes (2/2, 2026-12-02)"),
        ({2: "not reproduced"}, False, "no (2/3, 2026-12-03)"),
        ({2: "reproduced", 0: "reproduced"}, False, "no (2/3, 2026-12-04)"),
    ]
    for day, (outcomes, verdict, cell) in enumerate(steps, start=1):
        written = write_audit(board, entry[1], _audit_of(board, day, outcomes))
        assert written.audits[-1].audited is verdict
        assert f"| {cell} |" in (board / "LEADERBOARD.md").read_text()
    kept = read_board(board).entries[0].audits
    assert [audit.when[:10] for audit in kept] == [f"2026-12-0{day}" for day in (1, 2, 3, 4)]
    assert [r.outcome for r in kept[2].results] == ["not reproduced"]


def test_a_record_that_contradicts_its_config_is_not_reproduced(entry, tmp_path) -> None:
    _, entry_id, work = entry
    board = _board_copy(entry, tmp_path)
    _edit_record(board, entry_id, 2, lambda record: {**record, "seed": 7})
    audit = audit_entry(entry_id, 3, board, work_root=work, say=lambda _: None)
    result = next(r for r in audit.results if r.run_id.endswith("s2"))
    assert result.outcome == "not reproduced"
    assert "contradicts its own config: seed 7 in the record, 2 in its config" in result.detail


def test_a_record_whose_config_this_version_refuses_is_not_audited(entry, tmp_path) -> None:
    """The cause lies in the record, not on the operator's side: the audit goes on and says so."""
    _, entry_id, work = entry
    board = _board_copy(entry, tmp_path)

    def refused(record: dict) -> dict:
        config = {**record["training"]["config"], "seed_noise": -1.0}
        return {**record, "training": {**record["training"], "config": config}}

    _edit_record(board, entry_id, 1, refused)
    audit = audit_entry(entry_id, 3, board, work_root=work, say=lambda _: None)
    result = next(r for r in audit.results if r.seed == 1)
    assert result.outcome == "not audited" and not audit.audited
    refusal = "this version refuses the record's config (seed_noise must be a number >= 0"
    assert refusal in result.detail


def test_another_machine_is_compared_within_the_stated_tolerance(entry, tmp_path) -> None:
    _, entry_id, work = entry
    board = _board_copy(entry, tmp_path)

    def elsewhere(record: dict) -> dict:
        return {**record, "platform": {**record["platform"], "cpu": "another CPU"}}

    _edit_record(board, entry_id, 0, elsewhere)
    lines: list[str] = []
    audit = audit_entry(entry_id, 3, board, work_root=work, say=lines.append)
    result = next(r for r in audit.results if r.seed == 0)
    assert result.comparison == "tolerance" and result.outcome == "reproduced"
    assert set(result.bounds) == set(result.claimed)
    assert "comparison: tolerance, since another machine (cpu 'another CPU' vs" in "\n".join(lines)
    assert "1.96 * sqrt(2 p (1 - p) / n)" in audit.tolerance and audit.audited


@pytest.mark.parametrize(
    ("key", "value"),
    [("numpy_blas", "0123456789abcdef"), ("torch_cpu", "another capability")],
)
def test_other_numeric_kernels_on_the_same_cpu_are_another_machine(entry, key, value) -> None:
    board, _, _ = entry
    run = read_board(board).entries[0].runs[0]
    record = RunRecord.model_validate_json((board / run.record).read_text())
    assert comparison_mode(record) == ("bitwise", [])
    kernels_changed = record.model_copy(update={"platform": {**record.platform, key: value}})
    mode, reasons = comparison_mode(kernels_changed)
    assert mode == "tolerance"
    assert reasons == [f"another machine ({key} {value!r} vs {record.platform[key]!r} here)"]


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or "openblas" not in str(np.show_config("dicts")),
    reason="forces one of OpenBLAS's x86 kernels",
)
def test_the_blas_fingerprint_tells_openblas_kernels_apart() -> None:
    def fingerprint(coretype: str) -> str:
        command = "from gameon.integrity import numpy_blas_fingerprint as f; print(f())"
        env = {**os.environ, "OPENBLAS_CORETYPE": coretype}
        result = subprocess.run(
            [sys.executable, "-c", command], env=env, capture_output=True, text=True, check=True
        )
        return result.stdout.strip()

    assert fingerprint("Haswell") == fingerprint("Haswell")
    assert fingerprint("Haswell") != fingerprint("Sandybridge")


def _interrupted_rerun(board: Path, work: Path, sampling_seed: int) -> Path:
    """The folder an audit of one run (drawn with this sampling seed) re-trains in, left as an
    audit killed after the run's first iteration leaves it."""
    from gameon.benchmark.audit import plan_rerun, rerun_key, sample_runs
    from gameon.records import load_record

    entry = read_board(board).entries[0]
    (run,) = sample_runs(entry, 1, sampling_seed)
    plan = plan_rerun(load_record(board / run.record), (board / run.record).parent)
    folder = work / entry.id / f"{run.run_id}-{rerun_key(plan.config)}"
    run_experiment(replace(plan.config, iterations=0), folder, progress=False)
    return folder


def test_an_interrupted_audit_resumes_and_a_truncated_file_there_is_reported_and_redone(
    entry, tmp_path
) -> None:
    _, entry_id, _ = entry
    board = _board_copy(entry, tmp_path)
    folder = _interrupted_rerun(board, tmp_path / "work", sampling_seed=5)
    hdf5 = _hdf5(folder)
    _truncate(hdf5)
    lines: list[str] = []
    audit = audit_entry(entry_id, 1, board, seed=5, work_root=tmp_path / "work", say=lines.append)
    assert audit.audited and audit.results[0].outcome == "reproduced"
    text = "\n".join(lines)
    resuming = "  resuming the re-run there, which an earlier audit"
    assert f"re-training (collect, bc) in {folder}\n{resuming}" in text
    assert f"bad files in the audit's run folder, reported and the run re-done: {hdf5}" in text


def test_a_second_audit_trains_again_instead_of_reusing_the_first(entry, tmp_path) -> None:
    _, entry_id, _ = entry
    board = _board_copy(entry, tmp_path)
    first: list[str] = []
    audit_entry(entry_id, 1, board, work_root=tmp_path / "work", say=first.append)
    (folder,) = (tmp_path / "work" / entry_id).iterdir()
    assert f"  re-training (collect, bc) in {folder}" in first
    checkpoints = {p: p.stat().st_mtime_ns for p in folder.rglob("*.pt")}
    assert checkpoints
    (folder / "left by the first audit").touch()

    second: list[str] = []
    audit = audit_entry(entry_id, 1, board, work_root=tmp_path / "work", say=second.append)

    assert audit.audited and audit.results[0].outcome == "reproduced"
    index = second.index(f"  re-training (collect, bc) in {folder}")
    assert second[index + 1] == (
        "  the folder held a finished re-run of an earlier audit: cleared, so the run is trained "
        "again"
    )
    assert not (folder / "left by the first audit").exists()
    assert all(path.stat().st_mtime_ns != mtime for path, mtime in checkpoints.items())


def test_a_vlm_run_audits_through_the_replay_of_its_own_transcript(tmp_path) -> None:
    run_dir = tmp_path / "runs" / "collect__Reach__vlm-rules__bc__s0"
    config = replace(TINY, curriculum="vlm", vlm_add_skills=False)
    record = run_experiment(config, run_dir, progress=False)
    assert record.training is not None and record.training.transcript == "transcript.jsonl"
    result = submit([run_dir], tmp_path / "board", min_seeds=1)
    assert result.accepted, result.reasons
    copy = read_board(tmp_path / "board").entries[0].runs[0].record
    transcript = (tmp_path / "board" / copy).parent / "transcript.jsonl"
    assert transcript.read_bytes() == (run_dir / "transcript.jsonl").read_bytes()
    lines: list[str] = []

    audit = audit_entry(
        result.entry_id, 1, tmp_path / "board", work_root=tmp_path / "w", say=lines.append
    )

    assert audit.audited, audit.results[0].detail
    assert f"VLM (rules): replayed from the run's own transcript {transcript}" in "\n".join(lines)


def test_a_vlm_run_without_its_transcript_is_not_audited_and_says_so(entry, tmp_path) -> None:
    _, entry_id, work = entry
    board = _board_copy(entry, tmp_path)

    def gemini(record: dict) -> dict:
        record["training"]["config"] |= {"curriculum": "vlm", "vlm_backend": "gemini"}
        return {**record, "curriculum": "vlm", "curriculum_label": "vlm[gemini]"}

    _edit_record(board, entry_id, 0, gemini)
    lines: list[str] = []
    audit = audit_entry(entry_id, 3, board, work_root=work, say=lines.append)
    result = next(r for r in audit.results if r.seed == 0)
    assert result.outcome == "not audited" and not audit.audited
    assert "the board keeps no VLM transcript of this run" in result.detail
    assert "'gemini' cannot be re-run offline without one" in result.detail
    assert "| no (2/3, " in (board / "LEADERBOARD.md").read_text()


def test_records_carry_the_evidence_and_the_training_config(entry) -> None:
    board, _, _ = entry
    run = read_board(board).entries[0].runs[0]
    record = RunRecord.model_validate_json((board / run.record).read_text())
    assert run.checkpoint_sha256 == record.checkpoint_sha256 is not None
    assert run.weights_sha256 == record.weights_sha256 is not None
    assert run.dataset_sha256 == record.dataset_sha256 is not None
    assert record.training.config == asdict(replace(TINY, seed=0))
    assert record.training.learner_args["num_updates"] == TINY.num_updates
    assert record.training.env_kwargs == {"max_episode_steps": 2000, "terminate_on_success": False}
    assert set(record.platform) == {"system", "machine", "python", "cpu", "numpy_blas", "torch_cpu"}


def test_bad_audit_arguments_name_the_accepted_forms(entry, tmp_path) -> None:
    board = _board_copy(entry, tmp_path)
    entry_id = entry[1]
    with pytest.raises(ValueError, match=r"--runs must be between 1 and 3 .* got 4"):
        audit_entry(entry_id, 4, board)
    with pytest.raises(ValueError, match=f"entry 'nope' is not on the board; .* {entry_id}"):
        audit_entry("nope", 1, board)
    assert audit_entry(entry_id[:4], 1, board, work_root=entry[2], say=lambda _: None).audited


def test_gameon_leaderboard_audit_prints_the_audit_and_exits_with_its_verdict(
    entry, tmp_path, capsys
) -> None:
    from gameon.cli import main

    board = _board_copy(entry, tmp_path)
    entry_id, work = entry[1], entry[2]
    arguments = ["leaderboard", "audit", entry_id, "--board", str(board), "--work", str(work)]
    for runs, status in (("1", 0), ("0", 2)):
        with pytest.raises(SystemExit) as exit_info:
            main([*arguments, "--runs", runs])
        assert exit_info.value.code == status
        if status == 0:
            out = capsys.readouterr().out
            assert f"audit of entry {entry_id}" in out and "-> reproduced" in out
    assert "--runs must be between 1 and 3" in capsys.readouterr().err


def test_an_entry_is_found_by_its_number_with_or_without_leading_zeros(entry) -> None:
    board = read_board(entry[0])
    first = board.entries[0]
    eleventh = first.model_copy(update={"id": "0011-0badc0de"})
    board = board.model_copy(update={"entries": [first, eleventh]})
    for given, found in (("11", eleventh), ("0011", eleventh), ("1", first), ("001", first)):
        assert find_entry(board, given) is found
    assert find_entry(board, "0011-0bad") is eleventh and find_entry(board, first.id) is first
    with pytest.raises(ValueError, match="entry '12' is not on the board; give an entry id"):
        find_entry(board, "12")


def _audited_yes(entry: tuple[Path, str, Path], tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A copy of the board whose entry holds an earlier audit (yes, 1 of 1) and its files."""
    board = _board_copy(entry, tmp_path)
    run = read_board(board).entries[0].runs[0]
    result = RunAudit(run_id=run.run_id, seed=run.seed, outcome="reproduced", detail="identical")
    earlier = EntryAudit(
        audited=True,
        when="2026-12-01T00:00:00+00:00",
        runs=1,
        sampling_seed=0,
        sampled=[run.run_id],
        tolerance="bitwise",
        results=[result],
    )
    write_audit(board, entry[1], earlier)
    files = {name: (board / name).read_bytes() for name in ("leaderboard.json", "LEADERBOARD.md")}
    assert "| yes (1/1, 2026-12-01) |" in files["LEADERBOARD.md"].decode()
    return board, files


def test_an_unusable_work_folder_is_refused_before_training_and_the_board_kept(
    entry, tmp_path, capsys
) -> None:
    from gameon.cli import main

    board, files = _audited_yes(entry, tmp_path)
    not_a_folder = tmp_path / "notadir"
    not_a_folder.write_text("a file")
    arguments = ["leaderboard", "audit", entry[1], "--runs", "1", "--board", str(board)]
    with pytest.raises(SystemExit) as exit_info:
        main([*arguments, "--work", str(not_a_folder)])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert f"--work {not_a_folder} cannot hold the re-runs" in captured.err
    assert "give a folder that exists or can be created" in captured.err
    assert "re-training" not in captured.out
    assert {name: (board / name).read_bytes() for name in files} == files


def test_a_board_that_cannot_be_written_is_refused_before_training(entry, tmp_path) -> None:
    """A read-only board was found only when the audit was written, after the re-runs had
    trained, in a traceback that lost the audit."""
    board, files = _audited_yes(entry, tmp_path)
    work = tmp_path / "work"
    arguments = ["leaderboard", "audit", entry[1], "--runs", "1", "--board", str(board)]
    result = run_read_only(board, [*arguments, "--work", str(work)])
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"gameon leaderboard audit: cannot write to the board {board}: "
    )
    assert len(result.stderr.splitlines()) == 1
    assert not work.exists()
    assert {name: (board / name).read_bytes() for name in files} == files


@pytest.mark.parametrize(
    "error",
    [OSError(28, "No space left on device"), ModuleNotFoundError("No module named 'minari'")],
)
def test_a_rerun_that_fails_here_writes_nothing_and_keeps_the_earlier_audit(
    entry, tmp_path, monkeypatch, error
) -> None:
    from gameon.benchmark import audit as audit_module

    board, files = _audited_yes(entry, tmp_path)

    def fail(plan, folder):
        raise error

    monkeypatch.setattr(audit_module, "run_training", fail)
    lines: list[str] = []
    with pytest.raises(ValueError) as raised:
        audit_entry(entry[1], 1, board, work_root=tmp_path / "work", say=lines.append)

    (run,) = audit_module.sample_runs(read_board(board).entries[0], 1, 0)
    message = str(raised.value)
    assert f"run {run.run_id} (seed {run.seed}) failed to re-run in " in message
    assert f": {type(error).__name__}: {error}; nothing is written to " in message
    assert "keeps its previous audits (yes (1/1, 2026-12-01))" in message
    assert f"  -> the re-run failed: {type(error).__name__}: {error}" in lines
    assert {name: (board / name).read_bytes() for name in files} == files


ONLINE = """
name = "tiny"
seeds = [0]
eval_episodes_per_skill = 1
curricula = ["fixed"]

[online]
learners = ["ppo"]
env_ids = ["GameOn/Reach-v0"]
budget = { total_timesteps = 256, eval_every = 128, num_envs = 2 }
ppo = { num_steps = 64, num_minibatches = 4, update_epochs = 1 }
"""


@pytest.fixture(scope="module")
def online_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of one tiny PPO run made by the harness (256 env steps)."""
    from gameon.benchmark.matrix import expand, load_spec
    from gameon.benchmark.runs import execute

    root = tmp_path_factory.mktemp("online")
    spec = root / "tiny.toml"
    spec.write_text(ONLINE)
    (run,) = expand(load_spec(spec))
    record = execute(run, root / "runs" / run.run_id)
    assert record.training.config["num_steps"] == 64 and record.training.env_kwargs
    return root / "runs" / run.run_id


def test_a_hand_edited_budget_is_rejected_at_submission(online_run, tmp_path) -> None:
    """Entries rank within (protocol, env, budget): a record moved to another budget by hand
    contradicts its own config and its env steps, which submit checks as the audit does."""
    run = tmp_path / online_run.name
    shutil.copytree(online_run, run)
    record = json.loads((run / "record.json").read_text())
    record["budget"]["total_timesteps"] = 300000
    (run / "record.json").write_text(json.dumps(record))

    result = submit([run], tmp_path / "board", verify=True, min_seeds=1)

    assert not result.accepted and not (tmp_path / "board" / "leaderboard.json").exists()
    assert result.reasons == [
        f"run {record['run_id']!r} ({run}): tampered: the record contradicts its own config: "
        "total_timesteps 300000 in the record, 256 in its config",
        f"run {record['run_id']!r} ({run}): tampered: the record contradicts its own budget: "
        "env_steps 256, fewer than the budget's total_timesteps 300000 (an online run trains "
        "until it has taken them all)",
    ]


def test_an_online_run_audits_bitwise_from_its_learner_args(online_run, tmp_path) -> None:
    result = submit([online_run], tmp_path / "board", min_seeds=1)
    assert result.accepted, result.reasons

    audit = audit_entry(result.entry_id, 1, tmp_path / "board", work_root=tmp_path / "w")

    assert audit.audited and audit.results[0].comparison == "bitwise", audit.results[0].detail
    assert "the trained weights are identical" in audit.results[0].detail
    lines: list[str] = []
    again = audit_entry(
        result.entry_id, 1, tmp_path / "board", work_root=tmp_path / "w", say=lines.append
    )
    assert again.audited, again.results[0].detail
    assert (
        "  the folder held an online re-run of an earlier audit: cleared, so the run is trained "
        "again"
    ) in lines


# -- resumed runs and published entries ---------------------------------------------------------


def test_a_run_resumed_with_auto_stop_turned_off_audits_and_one_turned_on_is_refused(
    tmp_path,
) -> None:
    """A resume may change auto_stop. Turned off, the run goes on past its mastered iteration as
    one run with it off throughout would, so its record audits bitwise. Turned on, the run stops
    later than a run of its recorded config would (at once: every iteration masters a threshold
    of 0), so the record contradicts its config and is refused at submission."""
    mastered = replace(TINY, stop_threshold=0.0, auto_stop=True)
    went_on = tmp_path / "runs" / "collect__Reach__fixed__bc__s0"
    assert run_experiment(mastered, went_on, progress=False).extra["stopped"] == "mastered"
    record = run_experiment(replace(mastered, auto_stop=False), went_on, progress=False)
    assert [point.step for point in record.curve] == [0, 1]
    result = submit([went_on], tmp_path / "board", min_seeds=1)
    assert result.accepted, result.reasons
    audit = audit_entry(
        result.entry_id, 1, tmp_path / "board", work_root=tmp_path / "w", say=lambda _: None
    )
    assert audit.audited, audit.results[0].detail

    turned_on = tmp_path / "runs" / "collect__Reach__fixed__bc__s1"
    run_experiment(replace(mastered, seed=1, auto_stop=False), turned_on, progress=False)
    record = run_experiment(replace(mastered, seed=1, iterations=2), turned_on, progress=False)
    assert [point.step for point in record.curve] == [0, 1, 2]
    result = submit([turned_on], tmp_path / "board", min_seeds=1)
    assert not result.accepted
    assert "auto_stop is on and every target skill reached stop_threshold 0.0 at iteration 0, " in (
        "\n".join(result.reasons)
    )


SHARED_WINDOWS = """
min_window = 3

[[stage]]
name = "reach"
skills = ["reach"]
window_share = 0.5
threshold = 0.8

[[stage]]
name = "lift"
skills = ["lift"]
window_share = 0.5
threshold = 0.8
"""
"""Hand stages whose windows are half the run's budget: 3 outcomes for a run of 1 iteration of
4 episodes, 6 for one of 3 iterations."""


def test_an_extended_hand_run_audits_as_it_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand run extended with more iterations keeps the stage windows its start's budget gave;
    the audit starts the re-run with those iterations and extends it, so it reproduces bitwise. A
    re-run of the final iterations from scratch gets other windows: the scripted expert's 4
    reach successes of iteration 1 fill a window of 3, not one of 6, so the stages, the tasks and
    the weights part from iteration 2 on."""
    from gameon.experimenter import curriculum
    from gameon.experimenter.loop import make_loop_curriculum

    stages = tmp_path / "stages.toml"
    stages.write_text(SHARED_WINDOWS)
    monkeypatch.setattr(curriculum, "HAND_CURRICULUM_TOML", stages)
    config = replace(
        TINY,
        practice_env_id="GameOn/MultiSkill-v0",
        eval_env_id="GameOn/Reach-v0",
        curriculum="hand",
        collector="expert",
        episodes_per_iteration=4,
    )
    run_dir = tmp_path / "runs" / "collect__Reach__hand__bc__s0"
    run_experiment(config, run_dir, progress=False)
    record = run_experiment(replace(config, iterations=3), run_dir, progress=False)
    assert record.training.start_iterations == 1
    state = json.loads((run_dir / "state.json").read_text())
    from_scratch = make_loop_curriculum(replace(config, iterations=3))
    assert state["curriculum"]["windows"] == [3, 3]
    assert [stage.window for stage in from_scratch.stages] == [6, 6]
    result = submit([run_dir], tmp_path / "board", min_seeds=1)
    assert result.accepted, result.reasons
    lines: list[str] = []

    audit = audit_entry(
        result.entry_id, 1, tmp_path / "board", work_root=tmp_path / "w", say=lines.append
    )

    assert (audit.results[0].outcome, audit.results[0].comparison) == ("reproduced", "bitwise")
    assert "started with iterations 1 and extended to 3; the hand curriculum keeps" in "\n".join(
        lines
    )


def test_an_audit_refuses_a_stages_file_that_reads_otherwise_than_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record held only the stages file's path: an audit run from another folder trained on
    that folder's file and marked an honest run "not reproduced" for good."""
    from gameon.benchmark.audit import NotAuditable, plan_rerun
    from gameon.integrity import file_sha256

    monkeypatch.chdir(tmp_path)
    Path("stages.toml").write_text(SHARED_WINDOWS)
    config = replace(
        TINY,
        practice_env_id="GameOn/MultiSkill-v0",
        eval_env_id="GameOn/Reach-v0",
        curriculum="hand",
        hand_curriculum="stages.toml",
        collector="expert",
        episodes_per_iteration=4,
    )
    record = run_experiment(config, Path("run"), progress=False)
    assert record.training.input_files == {"stages.toml": file_sha256("stages.toml")}
    plan_rerun(record, Path("run"))
    Path("stages.toml").write_text(SHARED_WINDOWS.replace("0.8", "0.5"))
    with pytest.raises(NotAuditable, match="the run read stages.toml .* holds other contents"):
        plan_rerun(record, Path("run"))
    monkeypatch.chdir(tmp_path / "run")
    with pytest.raises(NotAuditable, match="stages.toml .* is missing: audit from the folder"):
        plan_rerun(record, tmp_path / "run")


def test_every_published_collect_v2_run_can_be_planned_for_an_audit_here() -> None:
    """Config fields added since the published runs were made (their defaults doing what those
    runs did, e.g. vlm_timeout and vlm_retries) leave them auditable at this commit."""
    from gameon.benchmark.audit import plan_rerun
    from gameon.records import load_record

    published = Path(__file__).resolve().parents[1] / "results"
    planned = []
    for entry in read_board(published).entries:
        if entry.protocol == "collect":  # v1: made before most of the config existed
            continue
        for run in entry.runs:
            record = load_record(published / run.record)
            plan = plan_rerun(record, (published / run.record).parent)
            planned.append((plan.protocol, plan.config.seed == record.seed))
    assert len(planned) >= 90 and set(planned) == {("collect", True)}
