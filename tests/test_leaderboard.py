"""Leaderboard submissions: a good one enters the board; malformed, tampered, duplicate, too-few-
seed and wrong-suite ones are rejected naming the run and the check, leaving the board's files
byte-identical; a corrupt board is refused; --verify re-evaluates checkpoints."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from record_factory import ENV_ID, make_record, write_run

from gameon.atomic import atomic_write
from gameon.benchmark.commands import main
from gameon.benchmark.leaderboard import BoardError, EntryAudit, read_board, submit
from gameon.evaluation import evaluate
from gameon.records import TargetEvaluation, VLMUsage

FIXED = [[True, False, False, False], [False] * 4, [True, True, False, False]]
LP = [[True, True, True, False], [True, True, False, False], [True] * 4]


def _runs(root: Path, outcomes: list[list[bool]], curriculum: str = "fixed") -> list[Path]:
    return [
        write_run(root, make_record(seed, successes, curriculum))
        for seed, successes in enumerate(outcomes)
    ]


def _snapshot(board: Path) -> dict[str, bytes]:
    return {str(p.relative_to(board)): p.read_bytes() for p in board.rglob("*") if p.is_file()}


@pytest.fixture
def board(tmp_path) -> Path:
    """A board holding one accepted entry (fixed, 3 seeds)."""
    board = tmp_path / "board"
    result = submit(_runs(tmp_path / "fixed", FIXED), board)
    assert result.accepted, result.reasons
    return board


def _rejected(board: Path, paths: list[Path], *needles: str, **kwargs) -> list[str]:
    before = _snapshot(board)
    result = submit(paths, board, **kwargs)
    assert not result.accepted and result.entry_id is None
    text = "\n".join(result.reasons)
    for needle in needles:
        assert needle in text, text
    assert _snapshot(board) == before
    return result.reasons


def test_good_submissions_enter_the_board_ranked(board, tmp_path) -> None:
    entry = read_board(board).entries[0]
    assert (entry.curriculum_label, entry.learner, entry.env_id) == ("fixed", "bc", ENV_ID)
    assert entry.seeds == [0, 1, 2] and entry.iqm == pytest.approx(0.25)
    assert entry.ci_low <= entry.iqm <= entry.ci_high and not entry.verified
    for run in entry.runs:
        assert json.loads((board / run.record).read_text())["run_id"] == run.run_id

    result = submit([p / "record.json" for p in _runs(tmp_path / "lp", LP, "lp")], board)

    assert result.accepted and result.reasons == []
    entries = read_board(board).entries
    assert [e.id for e in entries] == [entry.id, result.entry_id]
    assert entries[0] == entry
    table = (board / "LEADERBOARD.md").read_text()
    rows = [
        line for line in table.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")
    ]
    assert rows[0].startswith(f"| 1 | collect v1 | `{ENV_ID}` | lp | bc | 3 | 0.75 [")
    assert rows[1].startswith(f"| 2 | collect v1 | `{ENV_ID}` | fixed | bc | 3 | 0.25 [")
    assert "| 0123456 |" in rows[0] and result.entry_id in rows[0]


def test_malformed_records_are_rejected(board, tmp_path) -> None:
    runs = _runs(tmp_path / "lp", LP, "lp")
    (runs[0] / "record.json").write_text("{not json")
    data = json.loads((runs[1] / "record.json").read_text())
    del data["evaluation"]
    (runs[1] / "record.json").write_text(json.dumps(data))
    reasons = _rejected(board, runs, "schema", "is not JSON", "evaluation: Field required")
    assert str(runs[0]) in reasons[0] and str(runs[1]) in reasons[1]


def test_a_rejected_first_submission_leaves_no_board_behind(tmp_path) -> None:
    runs = _runs(tmp_path / "lp", LP, "lp")
    (runs[0] / "record.json").write_text("{not json")
    result = submit(runs, tmp_path / "boards" / "new")
    assert not result.accepted
    assert not (tmp_path / "boards").exists()


def test_submitting_no_records_is_a_usage_error(board, tmp_path, capsys) -> None:
    before = _snapshot(board)
    with pytest.raises(ValueError, match="no run records given: pass the record.json files"):
        submit([], board)
    assert main(["leaderboard", "submit", "--board", str(tmp_path / "new")]) == 2
    assert "gameon leaderboard submit: no run records given" in capsys.readouterr().err
    assert _snapshot(board) == before and not (tmp_path / "new").exists()


def test_the_usage_example_names_the_runs_of_one_group(tmp_path) -> None:
    """The example, `submit runs/bench/paper/collect__* --board results`, took every curriculum's
    runs, which submit refuses as more than one group."""
    from gameon.benchmark.matrix import expand, load_spec

    with pytest.raises(ValueError) as raised:
        submit([], tmp_path / "board")
    pattern = re.search(r"e\.g\. gameon leaderboard submit (\S+) --board", str(raised.value))
    assert pattern is not None, str(raised.value)
    results = Path("runs/bench/paper")
    chosen = [
        run
        for run in expand(load_spec("paper", check=False))
        if fnmatch.fnmatchcase(str(results / run.run_id), pattern.group(1))
    ]
    groups = {(r.protocol, r.curriculum.label, r.learner, r.env_id) for r in chosen}
    assert len(groups) == 1 and len({r.seed for r in chosen}) >= 3, [r.run_id for r in chosen]


def test_a_board_that_is_a_file_is_a_usage_error(tmp_path, capsys) -> None:
    runs = _runs(tmp_path / "fixed", FIXED)
    board = tmp_path / "board.json"
    board.write_text("{}")
    assert main(["leaderboard", "submit", *map(str, runs), "--board", str(board)]) == 2
    assert f"the board {board} is a file, not a folder" in capsys.readouterr().err
    assert board.read_text() == "{}"


def _edit(folder: Path, change) -> Path:
    """Apply `change` to the record of a run folder, as a hand edit would."""
    data = json.loads((folder / "record.json").read_text())
    change(data)
    (folder / "record.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("seed", "1", "seed: Input should be a valid integer, got '1'"),
        ("budget", {"iterations": 2.0}, "budget.iterations: Input should be a valid integer"),
        ("wall_seconds", "10", "wall_seconds: Input should be a valid number, got '10'"),
    ],
)
def test_a_value_of_the_wrong_type_is_rejected_not_converted(
    board, tmp_path, key: str, value: object, needle: str
) -> None:
    """A record the harness wrote has every value of its type; a hand edit may not."""
    runs = _runs(tmp_path / "lp", LP, "lp")
    _edit(runs[1], lambda data: data.__setitem__(key, value))
    reasons = _rejected(board, runs, "schema", "holds a value of the wrong type", needle)
    assert len(reasons) == 1 and str(runs[1]) in reasons[0]


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (("curve", 0, "per_skill", "reach"), 7.5, "less than or equal to 1"),
        (("curve", 0, "per_skill", "dance"), 0.5, "Input should be 'reach', 'lift'"),
        (("curve", 0, "step"), 10**9, "the curve's steps must not decrease"),
        (("collected", "skills", "reach"), -5, "greater than or equal to 0"),
        (("collected", "objects", "mauve"), 1, "Input should be 'red', 'green'"),
        (("wall_seconds",), float("inf"), "finite number"),
        (("evaluation", "episodes", 0, "episode_return"), float("nan"), "finite number"),
    ],
)
def test_records_with_impossible_values_fail_the_schema(
    board, tmp_path, path: tuple, value: object, needle: str
) -> None:
    runs = _runs(tmp_path / "lp", LP, "lp")
    data = json.loads((runs[0] / "record.json").read_text())
    data["collected"] = data["collected"] or {"episodes": 1, "skills": {}, "objects": {}}
    if path[0] == "curve":
        data["curve"].append({**data["curve"][-1], "step": data["curve"][-1]["step"] + 1})
    *parents, key = path
    table = data
    for parent in parents:
        table = table[parent]
    table[key] = value
    (runs[0] / "record.json").write_text(json.dumps(data))
    _rejected(board, runs, "schema", needle)


def test_a_missing_path_is_reported_as_missing_not_as_schema(board, tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    reasons = _rejected(board, [tmp_path / "nowhere", tmp_path / "empty"])
    assert reasons == [
        f"{tmp_path / 'nowhere'}: missing: no such file or folder; give record.json files or run "
        "folders",
        f"{tmp_path / 'empty'}: missing: the folder holds no record.json; give record.json files "
        "or run folders",
    ]


def test_tampered_claims_are_rejected_naming_run_and_field(board, tmp_path) -> None:
    runs = _runs(tmp_path / "lp", LP, "lp")
    data = json.loads((runs[1] / "record.json").read_text())
    data["curve"][-1]["success_rate"] = 1.0
    data["curve"][-1]["per_skill"]["reach"] = 1.0
    (runs[1] / "record.json").write_text(json.dumps(data))
    reasons = _rejected(board, runs, "tampered", "curve[-1].success_rate claims 1.0000")
    assert all("collect__Reach-v0__lp__bc__1" in reason for reason in reasons)
    assert any(
        "curve[-1].per_skill['reach'] claims 1.0000 but its episodes give 0.5000" in r
        for r in reasons
    )


@pytest.mark.parametrize(
    ("usage", "reason"),
    [
        ({}, "the model answered none of the run's calls"),
        ({"calls": 36, "used_answers": 0}, "none of the model's 36 answers was valid"),
    ],
    ids=["no answer", "no valid answer"],
)
def test_vlm_runs_none_of_whose_model_answers_was_used_are_rejected(
    board, tmp_path, usage: dict, reason: str
) -> None:
    """Every choice of such a run was the learning-progress fallback's: ranked under the model's
    label, it would credit the model with lp's result."""
    vlm = VLMUsage(backend="gemini", model="gemini-2.5-flash", fallbacks=12, **usage)
    paths = [
        write_run(tmp_path / "vlm", make_record(seed, wins, "vlm", "vlm[gemini]", vlm=vlm))
        for seed, wins in enumerate(LP)
    ]
    reasons = _rejected(
        board,
        paths,
        f"vlm: {reason} (12 module calls fell back to learning progress), so its practice was "
        "the fallback's, not vlm[gemini]'s; run it again once the model answers",
    )
    assert len(reasons) == 3


def test_vlm_runs_from_before_answers_were_counted_are_accepted(board, tmp_path) -> None:
    vlm = VLMUsage(backend="rules", model="rules", calls=6, fallbacks=1)
    assert vlm.used_answers is None
    paths = [
        write_run(tmp_path / "vlm", make_record(seed, wins, "vlm", "vlm[rules]", vlm=vlm))
        for seed, wins in enumerate(LP)
    ]
    result = submit(paths, board)
    assert result.accepted
    assert (result.entry.vlm_fallbacks, result.entry.vlm_used_answers) == (3, None)
    assert _row(board, result.entry_id)[12] == "3"  # fallbacks known, their share not


def _row(board: Path, entry_id: str) -> list[str]:
    """The cells of an entry's row in LEADERBOARD.md."""
    line = next(
        line for line in (board / "LEADERBOARD.md").read_text().splitlines() if entry_id in line
    )
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_board_shows_how_much_of_a_vlm_entrys_practice_fell_back(board, tmp_path) -> None:
    """A model that answered a few calls validly is accepted: the board says how few."""
    header = _row(board, "| rank |")
    assert header[12] == "VLM fallbacks"
    assert _row(board, read_board(board).entries[0].id)[12] == "-"  # fixed asks no model
    usage = [(30, 10), (40, 0), (20, 20)]  # (used answers, fallbacks) of each seed
    paths = [
        write_run(
            tmp_path / "vlm",
            make_record(
                seed,
                wins,
                "vlm",
                "vlm[gemini]",
                vlm=VLMUsage(backend="gemini", calls=used, used_answers=used, fallbacks=fallbacks),
            ),
        )
        for seed, (wins, (used, fallbacks)) in enumerate(zip(LP, usage, strict=True))
    ]
    result = submit(paths, board)
    assert result.accepted, result.reasons
    assert (result.entry.vlm_fallbacks, result.entry.vlm_used_answers) == (30, 90)
    assert _row(board, result.entry_id)[12] == "30 of 120 (25.0%)"


def test_duplicates_are_rejected(board, tmp_path) -> None:
    again = _runs(tmp_path / "again", FIXED)
    entry_id = read_board(board).entries[0].id
    _rejected(board, again, "duplicate: already on the board in entry " + entry_id)
    twice = _runs(tmp_path / "lp", LP, "lp")
    _rejected(board, [*twice, twice[0] / "record.json"], "twice")


def test_too_few_seeds_are_rejected(board, tmp_path) -> None:
    runs = _runs(tmp_path / "lp", LP[:2], "lp")
    _rejected(board, runs, "seeds: 2 distinct seed(s) [0, 1]; a submission needs at least 3")
    assert submit(runs, board, min_seeds=2).accepted


def test_wrong_suite_and_other_checks_are_rejected(board, tmp_path) -> None:
    runs = _runs(tmp_path / "lp", LP, "lp")
    data = json.loads((runs[0] / "record.json").read_text())
    data["evaluation"]["episodes"][2]["seed"] = 123
    (runs[0] / "record.json").write_text(json.dumps(data))
    data = json.loads((runs[1] / "record.json").read_text())
    data["git_commit"], data["versions"] = None, {}
    (runs[1] / "record.json").write_text(json.dumps(data))
    _rejected(
        board,
        runs,
        "collect__Reach-v0__lp__bc__0",
        "suite: episode 2 is",
        "versions: no gameon-rl version",
        "versions: git_commit None",
    )
    good = _runs(tmp_path / "good", LP, "lp")
    shorter = write_run(tmp_path / "short", make_record(5, [True, False], "lp"))
    _rejected(board, [*good, shorter], "suite: the runs were evaluated on different suites")
    other = write_run(tmp_path / "other", make_record(7, [True] * 4, "hand"))
    _rejected(board, [*good, other], "group: a submission is one")


def test_runs_judged_on_different_target_evaluation_sizes_are_one_submission_rejected(
    board, tmp_path
) -> None:
    """The ranked number of a collect v2 run comes from its target evaluations, so their sizes
    must agree across the submission's runs like the final evaluation's."""

    def composed(seed: int, per_skill: int) -> Path:
        record = make_record(seed, LP[seed], "lp")
        target = make_record(seed, [True, False] * (per_skill // 2), "lp").evaluation
        record = record.model_copy(
            update={"target_evaluations": [TargetEvaluation(mode="composed", evaluation=target)]}
        )
        return write_run(tmp_path / "runs", record)

    runs = [composed(0, 4), composed(1, 2), composed(2, 4)]
    (reason,) = _rejected(board, runs, "suite: the runs were evaluated on different suites")
    assert (
        "'collect__Reach-v0__lp__bc__0', 'collect__Reach-v0__lp__bc__2': final GameOn/Reach-v0 "
        "(4 per skill), composed GameOn/Reach-v0 (4 per skill); 'collect__Reach-v0__lp__bc__1': "
        "final GameOn/Reach-v0 (4 per skill), composed GameOn/Reach-v0 (2 per skill)"
    ) in reason
    same = [composed(0, 4), composed(1, 4), composed(2, 4)]
    result = submit(same, board)
    assert result.accepted, result.reasons


def test_a_corrupt_board_is_refused_and_left_alone(board, tmp_path, capsys) -> None:
    path = board / "leaderboard.json"
    runs = _runs(tmp_path / "lp", LP, "lp")
    cases = {
        b'{"format": "gameon-leaderboard-v1", "entries": [{"id": 1}]}': "entries.0.id: Input "
        "should be a valid string; entries.0.submitted: Field required;",
        b"\x00{": "<root>: Invalid JSON: expected value at line 1 column 1",
    }
    for corrupt, problem in cases.items():
        path.write_bytes(corrupt)
        before = _snapshot(board)
        with pytest.raises(BoardError) as raised:
            submit(runs, board)
        message = str(raised.value)
        assert message.startswith(
            f"{path} is corrupt, so nothing was changed: it is left untouched"
        )
        assert f"What is wrong: {problem}" in message
        assert main(["leaderboard", "submit", *map(str, runs), "--board", str(board)]) == 2
        assert f"gameon leaderboard submit: {message}" in capsys.readouterr().err
        assert _snapshot(board) == before


def test_a_board_that_repeats_an_entry_is_refused_as_corrupt(board, tmp_path) -> None:
    """A hand merge of two boards listed an entry twice, and `audit` could not pick either."""
    assert submit(_runs(tmp_path / "lp", LP, "lp"), board).accepted
    path = board / "leaderboard.json"
    data = json.loads(path.read_text())
    data["entries"].append(data["entries"][0])
    path.write_text(json.dumps(data))
    with pytest.raises(BoardError, match="entry ids must be unique; repeated: 0001-"):
        read_board(board)


def run_read_only(folder: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run `gameon ARGV` with `folder` read-only: its mode for a user, a read-only bind mount in
    a private mount namespace for root, whom modes do not stop."""
    command = [sys.executable, "-m", "gameon", *argv]
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run(command, capture_output=True, text=True)
        finally:
            folder.chmod(0o755)
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not permitted here: {probe.stderr.strip()}")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(folder), *command],
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("verify", [False, True])
def test_a_board_that_cannot_be_written_is_refused_before_the_records_are_checked(
    board, tmp_path, verify: bool
) -> None:
    """A read-only board was found only when its lock was taken, after every check (and with
    --verify every re-evaluation), in a traceback."""
    runs = _runs(tmp_path / "lp", LP, "lp")  # no checkpoints: --verify would reject them
    before = _snapshot(board)
    arguments = ["leaderboard", "submit", *map(str, runs), "--board", str(board)]
    result = run_read_only(board, arguments + ["--verify"] * verify)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"gameon leaderboard submit: cannot write to the board {board}: "
    )
    assert result.stderr.endswith("give --board a folder you can write to\n")
    assert len(result.stderr.splitlines()) == 1
    assert _snapshot(board) == before


def _checkpoint_run(root: Path, claim_success: bool | None = None) -> Path:
    """A run folder whose record's episodes are its checkpoint's true evaluation, or a doctored
    claim that every episode succeeded."""
    from gameon.policy import Actor, flat_size, load_policy, save_checkpoint

    env = gym.make(ENV_ID)
    actor = Actor(flat_size(env.observation_space), env.action_space.shape[0], hidden=(16,))
    folder = root / "run"
    save_checkpoint(folder / "policy.pt", "bc", ENV_ID, actor, None, {})
    report = evaluate(load_policy(folder / "policy.pt"), ENV_ID, episodes_per_skill=2)
    record = make_record(0, [], report=report, checkpoint="policy.pt")
    if claim_success is not None:
        successes = [claim_success] * len(report.episodes)
        record = make_record(0, successes, report=None, checkpoint="policy.pt")
    (folder / "record.json").write_text(record.model_dump_json())
    return folder


def test_verify_accepts_a_true_claim_and_rejects_a_doctored_one(tmp_path) -> None:
    true_run = _checkpoint_run(tmp_path / "true")
    truth = json.loads((true_run / "record.json").read_text())["evaluation"]["episodes"]
    claimed = not any(e["success"] for e in truth)
    doctored = _checkpoint_run(tmp_path / "doctored", claim_success=claimed)

    accepted = submit([true_run], tmp_path / "board", verify=True, min_seeds=1)
    assert accepted.accepted, accepted.reasons
    assert read_board(tmp_path / "board").entries[0].verified

    other = tmp_path / "other_board"
    reasons = _rejected(
        other,
        [doctored],
        "verify: its checkpoint does not reproduce",
        "success rate 1.000 claimed, 0.000 reproduced",
        "2 of 2 episodes differ",
        verify=True,
        min_seeds=1,
    )
    assert "collect__Reach-v0__fixed__bc__0" in reasons[0]
    (doctored / "policy.pt").unlink()
    _rejected(other, [doctored], "verify: no checkpoint at", verify=True, min_seeds=1)


def test_verify_counts_the_differing_episodes_of_doctored_target_evaluations(tmp_path) -> None:
    """A collect v2 record whose final evaluation is true but whose target evaluations claim the
    opposite of every episode was rejected saying "(0 of 2 episodes differ)": only the final
    evaluation's episodes were counted."""
    from gameon.experimenter.embodiment import evaluate_composed, learned_library
    from gameon.experimenter.skills import default_library

    run = _checkpoint_run(tmp_path)
    data = json.loads((run / "record.json").read_text())
    truth = data["evaluation"]
    composed = evaluate_composed(
        learned_library(default_library(), run / "policy.pt"), ENV_ID, 2, "GameOn/MultiSkill-v0"
    )
    flipped = {
        "monolithic": [not e["success"] for e in truth["episodes"]],
        "composed": [not e.success for e in composed.episodes],
    }
    data["protocol_version"] = 2
    data["extra"]["library"] = default_library().to_dict()
    data["target_evaluations"] = [
        {
            "mode": mode,
            "evaluation": {
                **truth,
                "episodes": [
                    {**e, "success": success}
                    for e, success in zip(truth["episodes"], successes, strict=True)
                ],
            },
        }
        for mode, successes in flipped.items()
    ]
    (run / "record.json").write_text(json.dumps(data))
    _rejected(
        tmp_path / "board",
        [run],
        f"monolithic {ENV_ID} ",
        f"(4 of 6 episodes differ: final {ENV_ID} 0 of 2, monolithic {ENV_ID} 2 of 2, "
        f"composed {ENV_ID} 2 of 2)",
        verify=True,
        min_seeds=1,
    )


@pytest.mark.parametrize("library", [None, {"format": "not a library"}])
def test_verify_rejects_a_composed_claim_without_a_library_it_can_load(tmp_path, library) -> None:
    """A collect v2 record's composed evaluation is re-run with the skill library it carries:
    one without it (or with a broken one) is rejected naming the run, not a KeyError."""
    run = _checkpoint_run(tmp_path)
    data = json.loads((run / "record.json").read_text())
    data["protocol_version"] = 2
    data["target_evaluations"] = [
        {"mode": mode, "evaluation": data["evaluation"]} for mode in ("composed", "monolithic")
    ]
    if library is not None:
        data["extra"]["library"] = library
    (run / "record.json").write_text(json.dumps(data))
    _rejected(
        tmp_path / "board",
        [run],
        "collect__Reach-v0__fixed__bc__0",
        f"verify: cannot re-run its composed {ENV_ID} evaluation",
        'no skill library (extra["library"])' if library is None else "not a skill library",
        verify=True,
        min_seeds=1,
    )


def test_ctrl_c_while_the_board_is_written_leaves_the_table_matching_it(
    board, tmp_path, monkeypatch
) -> None:
    """Ctrl-C just after leaderboard.json is replaced is held back until LEADERBOARD.md is too,
    so the table never misses an entry the board holds."""
    import signal

    from gameon.benchmark import leaderboard

    def write_then_interrupt(path: Path, data: str | bytes) -> Path:
        written = atomic_write(path, data)
        if path.name == leaderboard.BOARD_FILE:
            signal.raise_signal(signal.SIGINT)
        return written

    monkeypatch.setattr(leaderboard, "atomic_write", write_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        submit(_runs(tmp_path / "lp", LP, "lp"), board)
    entries = read_board(board).entries
    assert [e.curriculum_label for e in entries] == ["fixed", "lp"]
    table = (board / "LEADERBOARD.md").read_text()
    assert all(entry.id in table for entry in entries), table


def test_concurrent_submissions_both_land(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    groups = [
        _runs(tmp_path / name, outcomes, name) for name, outcomes in (("fixed", FIXED), ("lp", LP))
    ]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda runs: submit(runs, tmp_path / "board"), groups))
    assert all(r.accepted for r in results)
    entries = read_board(tmp_path / "board").entries
    assert sorted(e.curriculum_label for e in entries) == ["fixed", "lp"]
    assert len({e.id for e in entries}) == 2


def test_equal_scores_share_a_rank(board, tmp_path) -> None:
    hand = [list(reversed(outcomes)) for outcomes in FIXED]  # same success counts as fixed
    assert submit(_runs(tmp_path / "hand", hand, "hand"), board).accepted
    assert submit(_runs(tmp_path / "lp", LP, "lp"), board).accepted
    table = (board / "LEADERBOARD.md").read_text().splitlines()
    rows = [line.split(" | ") for line in table if "| collect v1 |" in line]
    ranks = {row[3]: row[0] for row in rows}
    assert ranks == {"lp": "| 1", "fixed": "| 2", "hand": "| 2"}
    assert all(entry.suite_iqm == entry.iqm for entry in read_board(board).entries)


def test_equal_scores_summed_in_another_order_share_a_rank(tmp_path) -> None:
    """0.1 + 0.2 + 0.3 and 0 + 0.3 + 0.3 differ in the last bit; both IQMs are 0.20."""
    board = tmp_path / "board"
    rising = [[True] * k + [False] * (10 - k) for k in (1, 2, 3)]
    even = [[True] * k + [False] * (10 - k) for k in (0, 3, 3)]
    assert submit(_runs(tmp_path / "fixed", even), board).accepted
    assert submit(_runs(tmp_path / "hand", rising, "hand"), board).accepted
    table = (board / "LEADERBOARD.md").read_text().splitlines()
    rows = [line.split(" | ") for line in table if "| collect v1 |" in line]
    assert {row[3]: row[0] for row in rows} == {"fixed": "| 1", "hand": "| 1"}


def _with_budget(paths: list[Path], budget: dict) -> list[Path]:
    for path in paths:
        data = json.loads((path / "record.json").read_text())
        data["budget"] = budget
        (path / "record.json").write_text(json.dumps(data))
    return paths


def test_budgets_are_shown_and_ranked_apart_and_one_submission_has_one(board, tmp_path) -> None:
    longer = {"iterations": 5, "episodes_per_iteration": 32, "seed_episodes": 150}
    longer["num_updates"] = 5000
    mixed = _runs(tmp_path / "mixed", LP, "lp")
    _with_budget(mixed[:1], longer)
    _rejected(board, mixed, "budget: the runs trained on different budgets")

    lp = _with_budget(_runs(tmp_path / "lp", LP, "lp"), longer)
    assert submit(lp, board).accepted
    entries = {e.curriculum_label: e for e in read_board(board).entries}
    assert entries["lp"].budget == "5 x 32 tasks, 150 seed episodes, 5000 updates"
    assert entries["fixed"].budget == "iterations 2"
    table = (board / "LEADERBOARD.md").read_text().splitlines()
    rows = {row.split(" | ")[3]: row for row in table if "| collect v1 |" in row}
    # lp scores more than fixed but on another budget: each is first among its own
    assert rows["lp"].startswith("| 1 |") and rows["fixed"].startswith("| 1 |")
    assert "| 5 x 32 tasks, 150 seed episodes, 5000 updates |" in rows["lp"]


MIXED = [bool(i % 3 == 0 or i % 5 == 0) for i in range(24)]
"""24 episodes of one skill whose pattern two independent runs would share by chance with a
probability far below leaderboard.CHANCE."""


def test_a_run_copied_under_other_seed_labels_is_rejected(board, tmp_path) -> None:
    copies = [write_run(tmp_path / "copies", make_record(s, MIXED, "lp")) for s in (0, 1, 2)]
    reasons = _rejected(board, copies, "duplicate: every evaluation episode's outcome and return")
    assert "collect__Reach-v0__lp__bc__1" in reasons[0]
    assert "of run 'collect__Reach-v0__lp__bc__0'" in reasons[0]
    assert "whose seed differs (1 vs 0)" in reasons[0]

    honest = [MIXED, [not x for x in MIXED], MIXED[::-1]]
    entry = submit(_runs(tmp_path / "honest", honest, "hand"), board)
    assert entry.accepted, entry.reasons
    relabelled = write_run(tmp_path / "relabelled", make_record(9, MIXED, "lp"))
    others = _runs(tmp_path / "others", [MIXED[::2] * 2, MIXED[1::2] * 2], "lp")
    reasons = _rejected(board, [relabelled, *others], "whose seed differs (9 vs 0)")
    assert f"of entry {entry.entry_id}" in reasons[0]


def test_runs_that_agree_by_chance_are_not_duplicates(board, tmp_path) -> None:
    failures = _runs(tmp_path / "failures", [[False] * 24] * 3, "lp")
    result = submit(failures, board)
    assert result.accepted, result.reasons


def _copies_of_one_checkpoint(root: Path, seeds: list[int]) -> list[Path]:
    """One honest run folder (checkpoint and true record) copied under other seed labels."""
    import shutil

    original = _checkpoint_run(root / "original")
    record = json.loads((original / "record.json").read_text())
    assert record.get("checkpoint_sha256") is None  # an older record: the hash is computed
    folders = []
    for seed in seeds:
        folder = root / f"copy_{seed}"
        shutil.copytree(original, folder)
        relabelled = {**record, "seed": seed, "run_id": f"{record['run_id'][:-2]}_{seed}"}
        (folder / "record.json").write_text(json.dumps(relabelled))
        folders.append(folder)
    return folders


@pytest.mark.parametrize("verify", [False, True])
def test_copies_sharing_a_checkpoint_are_rejected(tmp_path, verify: bool) -> None:
    from gameon.integrity import file_sha256

    copies = _copies_of_one_checkpoint(tmp_path, [0, 1, 2])
    digest = file_sha256(copies[0] / "policy.pt")
    reasons = _rejected(
        tmp_path / "board",
        copies,
        f"duplicate: its checkpoint file has the sha256 {digest[:12]}... of run",
        verify=verify,
    )
    assert len(reasons) == 2 and "__bc__1" in reasons[0] and "__bc__0" in reasons[0]


def test_a_record_whose_checkpoint_hash_is_not_its_file_is_rejected(tmp_path) -> None:
    (run,) = _copies_of_one_checkpoint(tmp_path, [0])
    record = json.loads((run / "record.json").read_text())
    (run / "record.json").write_text(json.dumps({**record, "checkpoint_sha256": "0" * 64}))
    _rejected(tmp_path / "board", [run], "evidence: checkpoint", "the record claims 000000000000")
    (run / "record.json").write_text(json.dumps({**record, "checkpoint_sha256": "x"}))
    _rejected(tmp_path / "board", [run], "schema", "checkpoint_sha256")


def test_entry_ids_stay_unique_after_removals(board, tmp_path) -> None:
    def remove(entry_id: str) -> None:
        path = board / "leaderboard.json"
        data = json.loads(path.read_text())
        data["entries"] = [e for e in data["entries"] if e["id"] != entry_id]
        path.write_text(json.dumps(data))

    first = read_board(board).entries[0].id
    second = submit(_runs(tmp_path / "lp", LP, "lp"), board).entry_id
    remove(first)
    hand = [list(reversed(outcomes)) for outcomes in FIXED]
    third = submit(_runs(tmp_path / "hand", hand, "hand"), board).entry_id
    assert [first[:4], second[:4], third[:4]] == ["0001", "0002", "0003"]
    remove(third)
    fourth = submit(_runs(tmp_path / "again", hand, "hand"), board).entry_id
    assert fourth.startswith("0004-")
    ids = [entry.id for entry in read_board(board).entries]
    assert ids == [second, fourth] and read_board(board).next_number == 5

    path = board / "leaderboard.json"
    legacy = json.loads(path.read_text())
    del legacy["next_number"]  # a board from before the counter: one more than the largest
    path.write_text(json.dumps(legacy))
    fifth = submit(_runs(tmp_path / "fixed", FIXED), board).entry_id
    assert fifth.startswith("0005-")


def _trained(folder: Path, **training) -> Path:
    """Give a factory record the training config it would have run with (and `training`)."""

    def change(data: dict) -> None:
        config = {key: data[key] for key in ("seed", "curriculum", "env_id", "learner")}
        data["training"] = {"config": {**config, **data["budget"]}, **training}

    return _edit(folder, change)


def test_a_record_that_contradicts_its_config_or_budget_is_rejected(board, tmp_path) -> None:
    """Entries are ranked within their budget: a record cannot move to another by a hand edit."""
    honest = [_trained(run) for run in _runs(tmp_path / "honest", LP, "lp")]
    assert submit(honest, board).accepted

    def more(data: dict) -> None:
        data["budget"]["iterations"] = 3

    edited = [_edit(_trained(run), more) for run in _runs(tmp_path / "edited", LP, "hand")]
    reasons = _rejected(
        board,
        edited,
        "tampered: the record contradicts its own config: iterations 3 in the record, 2 in its "
        "config",
    )
    assert len(reasons) == 3

    def fewer(data: dict) -> None:
        data["budget"]["iterations"] = 1

    shrunk = [_edit(run, fewer) for run in _runs(tmp_path / "shrunk", LP, "hand")]
    _rejected(
        board,
        shrunk,
        "tampered: the record contradicts its own budget: curve[-1].step 2, beyond the budget's 1 "
        "iterations",
    )

    def online(data: dict) -> None:
        data.update(protocol="online", curve_unit="env_steps", budget={"total_timesteps": 600})
        data["curve"][-1]["step"] = data["env_steps"] = 500

    short = [_edit(run, online) for run in _runs(tmp_path / "online", LP, "hand")]
    _rejected(
        board,
        short,
        "the record contradicts its own budget: env_steps 500, fewer than the budget's "
        "total_timesteps 600",
    )


def test_a_record_started_with_more_iterations_than_its_budget_is_rejected(board, tmp_path) -> None:
    """A run is only ever extended, so it cannot have started with more iterations than its
    record's budget holds (the audit would re-run it from that start)."""
    extended = [_trained(run, start_iterations=1) for run in _runs(tmp_path / "ext", LP, "hand")]
    assert submit(extended, tmp_path / "another board").accepted
    more = [_trained(run, start_iterations=3) for run in _runs(tmp_path / "more", LP, "hand")]
    _rejected(
        board,
        more,
        "the record contradicts its own budget: training.start_iterations 3, more than the "
        "budget's 2 iterations",
    )


def test_target_skills_other_than_the_envs_are_rejected(board, tmp_path) -> None:
    """The target success is over the record's target skills: edited to an easier skill of its
    evaluation, it would rank the run by that skill."""

    def easier(data: dict) -> None:
        data.update(env_id="GameOn/Tower-v0", target_skills=["reach"])

    _rejected(
        board,
        [_edit(run, easier) for run in _runs(tmp_path / "easier", LP, "lp")],
        "tampered: target_skills ['reach'] but GameOn/Tower-v0's target skills are ['tower']",
    )


def test_a_run_resumed_with_auto_stop_turned_on_is_rejected(board, tmp_path) -> None:
    """auto_stop stops a run at its first iteration that masters the targets, so a record whose
    config has it on and whose curve goes on past such an iteration (a run started with it off,
    resumed with it on) cannot be re-run from its config; off, or with no earlier mastery, it
    is accepted."""

    def mastered_first(data: dict) -> None:
        first = data["curve"][0]
        first.update(success_rate=1.0, per_skill=dict.fromkeys(first["per_skill"], 1.0))

    def auto_stop(on: bool):
        def change(data: dict) -> None:
            config = data["training"]["config"]
            config.update(auto_stop=on, stop_threshold=0.9, target_skills=data["target_skills"])

        return change

    def runs(name: str, curriculum: str, *changes) -> list[Path]:
        folders = [_trained(run) for run in _runs(tmp_path / name, LP, curriculum)]
        for change in changes:
            folders = [_edit(folder, change) for folder in folders]
        return folders

    _rejected(
        board,
        runs("resumed", "hand", mastered_first, auto_stop(True)),
        "tampered: the record contradicts its own config: auto_stop is on and every target skill "
        "reached stop_threshold 0.9 at iteration 0, yet the curve goes on to iteration 2: a run "
        "of this config stops at 0",
    )
    assert submit(runs("off", "hand", mastered_first, auto_stop(False)), board).accepted
    assert submit(runs("on", "lp", auto_stop(True)), board).accepted


@pytest.mark.parametrize("where", ["absolute", "relative", "link"])
@pytest.mark.parametrize("field", ["training.transcript", "checkpoint"])
def test_a_record_naming_a_file_outside_its_run_folder_is_rejected(
    board, tmp_path, field: str, where: str
) -> None:
    """Nothing outside the submitted run folders is read, hashed or copied into the board."""
    secret = tmp_path / "secret.txt"
    secret.write_text("not the submitter's to publish")
    runs = [_trained(run) for run in _runs(tmp_path / "lp", LP, "lp")]
    run = runs[0]
    value = {"absolute": str(secret), "relative": "../../secret.txt", "link": "linked.txt"}[where]
    (run / "linked.txt").symlink_to(secret)
    if field == "checkpoint":
        _edit(run, lambda data: data.__setitem__("checkpoint", value))
    else:
        _trained(run, transcript=value)

    (reason,) = _rejected(board, runs, f"paths: {field} {value!r} resolves to {secret}")
    assert reason.startswith(f"{run}: paths: ")
    assert f"outside the run folder {run.resolve()}" in reason
    assert not any(b"not the submitter's" in data for data in _snapshot(board).values())


def test_a_transcript_link_out_of_the_run_folder_is_rejected(board, tmp_path) -> None:
    """A run folder's own transcript.jsonl, read when the record names none, is held to the same
    rule; one inside the folder is kept beside the record copy."""
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("{}\n")
    runs = _runs(tmp_path / "lp", LP, "lp")
    (runs[2] / "transcript.jsonl").symlink_to(outside)
    _rejected(board, runs, "paths: the run folder's transcript 'transcript.jsonl' resolves to")

    (runs[2] / "transcript.jsonl").unlink()
    (runs[2] / "transcript.jsonl").write_text('{"inside": true}\n')
    result = submit(runs, board)
    assert result.accepted, result.reasons
    copy = board / result.entry.runs[2].record
    assert (copy.parent / "transcript.jsonl").read_text() == '{"inside": true}\n'


def _one_run_audit(run: dict, day: str, outcome: str) -> dict:
    """An audit of one run of an entry (a run as leaderboard.json holds it), as JSON."""
    result = {"run_id": run["run_id"], "seed": run["seed"], "outcome": outcome, "detail": "seen"}
    return {
        "audited": outcome == "reproduced",
        "when": f"{day}T00:00:00+00:00",
        "runs": 1,
        "sampling_seed": 0,
        "sampled": [run["run_id"]],
        "tolerance": "bitwise",
        "results": [result],
    }


def test_a_board_that_kept_one_audit_per_entry_still_loads_and_keeps_it(board, tmp_path) -> None:
    """leaderboard.json files written before audits accumulated hold `audit` (null when none):
    it is read as the entry's first audit, and a later audit is added to it."""
    from gameon.benchmark.audit import write_audit

    second = submit(_runs(tmp_path / "lp", LP, "lp"), board)
    path = board / "leaderboard.json"
    data = json.loads(path.read_text())
    runs = data["entries"][0]["runs"]
    legacy = _one_run_audit(runs[0], "2026-11-30", "not reproduced")
    for entry, audit in zip(data["entries"], (legacy, None), strict=True):
        del entry["audits"]
        entry["audit"] = audit
    path.write_text(json.dumps(data))

    entries = read_board(board).entries
    (kept,) = entries[0].audits
    assert kept.model_dump(mode="json", exclude_defaults=True) == legacy
    assert entries[1].audits == [] and entries[1].id == second.entry_id

    later = EntryAudit.model_validate(_one_run_audit(runs[1], "2026-12-01", "reproduced"))
    written = write_audit(board, entries[0].id, later)
    assert written.audits[0] == kept and not written.audits[-1].audited
    stored = json.loads(path.read_text())["entries"]
    assert all("audit" not in entry and "audits" in entry for entry in stored)
    assert "| no (1/2, 2026-12-01) |" in (board / "LEADERBOARD.md").read_text()


def test_a_label_other_than_its_configs_curriculum_is_rejected(board, tmp_path) -> None:
    """The label is what the board groups and ranks by, yet nothing checked it: fixed runs
    relabelled `vlm[gemini:gemini-2.5-flash]` were accepted, verified and audited as that
    model's entry (the audit re-trains the config, fixed, and reproduces it)."""

    def relabel(data: dict) -> None:
        data["curriculum_label"] = "vlm[gemini:gemini-2.5-flash]"

    relabelled = [_edit(_trained(run), relabel) for run in _runs(tmp_path / "fake", LP)]
    reasons = _rejected(
        board,
        relabelled,
        "tampered: the record contradicts its own config: curriculum_label "
        "'vlm[gemini:gemini-2.5-flash]' in the record, but its config's curriculum is labelled "
        "'fixed'",
    )
    assert len(reasons) == 3

    def rules(data: dict) -> None:
        data["training"]["config"]["vlm_backend"] = "rules"
        data["curriculum_label"] = "vlm[rules]"

    honest = [_edit(_trained(run), rules) for run in _runs(tmp_path / "vlm", LP, "vlm")]
    assert submit(honest, board).accepted

    def gemini(data: dict) -> None:
        rules(data)
        data["curriculum_label"] = "vlm[gemini:gemini-2.5-flash]"

    claimed = [_edit(_trained(run), gemini) for run in _runs(tmp_path / "claimed", FIXED, "vlm")]
    _rejected(board, claimed, "but its config's curriculum is labelled 'vlm[rules]'")


def test_a_runs_learning_curves_travel_with_its_record(board, tmp_path) -> None:
    """The page promised each entry's plots, but submit copied the records alone, so no entry
    ever had one. A curves.png that leads out of its run folder is not read."""
    runs = _runs(tmp_path / "lp", LP, "lp")
    (runs[0] / "curves.png").write_bytes(b"\x89PNG curves of seed 0")
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(b"not the run's")
    (runs[1] / "curves.png").symlink_to(outside)
    result = submit(runs, board)
    assert result.accepted, result.reasons
    entry = read_board(board).entries[-1]
    copies = [(board / run.record).parent / "curves.png" for run in entry.runs]
    assert copies[0].read_bytes() == b"\x89PNG curves of seed 0"
    assert not copies[1].exists() and not copies[2].exists()


def test_a_label_with_a_line_break_keeps_its_row_whole(tmp_path) -> None:
    """Cells escaped '|' but not line breaks: the row split in two, its second half outside the
    table; raw HTML in a label reached LEADERBOARD.md as HTML."""
    label = "odd\nlabel <b>"
    runs = [
        write_run(tmp_path / "odd", make_record(seed, wins, "fixed", label))
        for seed, wins in enumerate(LP)
    ]
    board = tmp_path / "board"
    assert submit(runs, board).accepted
    rows = [line for line in (board / "LEADERBOARD.md").read_text().splitlines() if "odd" in line]
    assert len(rows) == 1 and rows[0].startswith("| 1 | ") and "odd label &lt;b>" in rows[0]
