"""The static leaderboard page: written from leaderboard.json with every entry, the curricula
labels verbatim, relative links and no remote asset; the embedded data cannot close its script
tag; `gameon leaderboard html` and an accepted submit write it; and in a real headless Chromium
it loads without console errors, shows every entry, and sorts by score and filters as the URL
fragment asks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from record_factory import ENV_ID, make_record, write_run

from gameon.benchmark.commands import main
from gameon.benchmark.leaderboard import (
    Board,
    BoardError,
    EntryAudit,
    ranked,
    read_board,
    submit,
)
from gameon.benchmark.leaderboard_page import (
    RULES_NOTE,
    chromium_command,
    find_chromium,
    write_page,
)

LIFT = "GameOn/Lift-v0"
NASTY = 'x</script><script>document.title="pwned"</script><!--'
GROUPS = [  # (curriculum, label, learner, env, per-seed outcomes)
    (
        "fixed",
        None,
        "bc",
        ENV_ID,
        [[True, False, False, False], [False] * 4, [True] * 2 + [False] * 2],
    ),
    (
        "vlm",
        "vlm[rules]",
        "bc",
        ENV_ID,
        [[True] * 3 + [False], [True] * 2 + [False] * 2, [True] * 4],
    ),
    ("hand", None, "ppo", LIFT, [[False] * 4, [False] * 4, [True] + [False] * 3]),
]
DATA = re.compile(r'<script type="application/json" id="board-data">(.*?)</script>', re.S)


def _board(root: Path) -> Path:
    """A board of three submitted entries (two envs, two learners, vlm[rules]), a plot in one
    entry's records folder, and a hand-written collect v2 entry with a monolithic IQM, an audit
    and a label that tries to close the script tag."""
    board = root / "board"
    for curriculum, label, learner, env_id, outcomes in GROUPS:
        runs = [
            write_run(
                root / curriculum,
                make_record(seed, wins, curriculum, label, learner, env_id=env_id),
            )
            for seed, wins in enumerate(outcomes)
        ]
        result = submit(runs, board)
        assert result.accepted, result.reasons
    state = read_board(board)
    first = state.entries[0]
    (board / "leaderboard" / first.id / "curves.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    extra = first.model_copy(
        update={
            "id": "0099-0000beef",
            "protocol": "collect v2",
            "curriculum_label": NASTY,
            "monolithic_iqm": 0.4,
            "vlm_fallbacks": 30,
            "vlm_used_answers": 90,
            "audits": [
                EntryAudit.model_validate(_audit("2026-12-01", "r", "not reproduced")),
                EntryAudit.model_validate(_audit("2026-12-02", "q", "reproduced")),
            ],
        }
    )
    board_file = board / "leaderboard.json"
    board_file.write_text(Board(entries=[*state.entries, extra]).model_dump_json(indent=1))
    return board


def _audit(day: str, run_id: str, outcome: str) -> dict:
    """An audit of one run on `day`, as leaderboard.json holds it."""
    return {
        "audited": outcome == "reproduced",
        "when": f"{day}T00:00:00+00:00",
        "runs": 1,
        "sampling_seed": 0,
        "sampled": [run_id],
        "tolerance": "bitwise",
        "results": [{"run_id": run_id, "seed": 0, "outcome": outcome, "detail": "compared"}],
    }


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _board(tmp_path_factory.mktemp("page"))


@pytest.fixture(scope="module")
def page(board: Path) -> Path:
    return write_page(board / "leaderboard.json")


def _rows(page: Path) -> list[dict]:
    return json.loads(DATA.search(page.read_text()).group(1))["rows"]


def test_the_page_holds_every_entry_with_labels_verbatim_and_nothing_remote(
    board: Path, page: Path
) -> None:
    assert page == board / "leaderboard" / "index.html"
    entries = read_board(board).entries
    rows = {row["id"]: row for row in _rows(page)}
    assert set(rows) == {entry.id for entry in entries} and len(rows) == 4
    for entry in entries:
        assert rows[entry.id]["curriculum"] == entry.curriculum_label
    text = page.read_text()
    assert '"curriculum": "vlm[rules]"' in text and RULES_NOTE in text
    assert not re.search(r"https?://|//cdn|<link|\bsrc=|@import|fetch\(|XMLHttpRequest", text)
    hrefs = re.findall(r'href="([^"]*)"', text) + [
        link["href"] for row in rows.values() for link in row["runs"] + row["plots"]
    ]
    assert hrefs and not any(h.startswith(("/", "file:")) or ":" in h for h in hrefs)
    first = rows[entries[0].id]
    assert first["href"] == f"{entries[0].id}/" and first["plots"][0]["name"] == "curves.png"
    assert [run["href"] for run in first["runs"]] == [
        str(Path(run.record).relative_to("leaderboard")) for run in entries[0].runs
    ]
    for run in first["runs"]:
        assert (page.parent / run["href"]).is_file()
    extra = rows["0099-0000beef"]
    assert (extra["protocol"], extra["monolithic_text"]) == ("collect v2 (mixed)", "0.40")
    # the later audit reproduced another run: the earlier failure still shows, with its date
    assert extra["audited"] == "no (1/2, 2026-12-02)" and first["audited"] == "-"
    assert first["verified"] == "no" and first["monolithic_text"] == "-"
    assert (extra["vlm_fallbacks"], extra["vlm_fallbacks_text"]) == (0.25, "30 of 120 (25.0%)")
    assert (first["vlm_fallbacks"], first["vlm_fallbacks_text"]) == (None, "-")
    assert re.search(r'id="generated">\d{4}-\d\d-\d\dT', text)


def test_no_string_can_close_the_embedded_script(page: Path) -> None:
    text = page.read_text()
    assert text.count("</script>") == 2 and text.count("<script") == 2
    assert NASTY not in text and "<!--" not in DATA.search(text).group(1)
    assert any(row["curriculum"] == NASTY for row in _rows(page))


def test_a_corrupt_board_writes_no_page(tmp_path: Path) -> None:
    board = tmp_path / "leaderboard.json"
    board.write_text('{"format": "gameon-leaderboard-v1", "entries": [{"id": 1}]}')
    with pytest.raises(BoardError, match="not a leaderboard, so no page is written") as raised:
        write_page(board, tmp_path / "index.html")
    assert "entries.0.id: Input should be a valid string" in str(raised.value)
    assert not (tmp_path / "index.html").exists()


@pytest.mark.parametrize("given", ["absent.json", "."])
def test_a_missing_board_says_there_is_none_and_how_to_give_one(tmp_path: Path, given: str) -> None:
    board = tmp_path / given
    with pytest.raises(BoardError, match=r"no leaderboard at .* \((no such file|a folder)\); give"):
        write_page(board, tmp_path / "index.html")
    assert not (tmp_path / "index.html").exists()


def test_gameon_leaderboard_html_and_submit_write_the_page(
    board: Path, page: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "site" / "board.html"
    command = ["leaderboard", "html", "--leaderboard", str(board / "leaderboard.json")]
    assert main([*command, "--out", str(out)]) == 0
    assert f"page: {out}" in capsys.readouterr().out
    assert {row["id"] for row in _rows(out)} == {row["id"] for row in _rows(page)}
    for row in _rows(out):  # relative links that resolve from the page's folder
        assert all((out.parent / run["href"]).is_file() for run in row["runs"])

    fresh = tmp_path / "fresh"
    runs = [write_run(tmp_path / "runs", make_record(seed, [seed > 0] * 4)) for seed in range(3)]
    assert main(["leaderboard", "submit", *map(str, runs), "--board", str(fresh)]) == 0
    said = capsys.readouterr().out
    (entry,) = read_board(fresh).entries
    assert f"accepted as entry {entry.id} (audit it with: gameon leaderboard audit " in said
    assert "page: " in said
    assert [row["id"] for row in _rows(fresh / "leaderboard" / "index.html")] == [entry.id]


def test_html_takes_the_board_folder_as_submit_and_audit_do(
    board: Path, page: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`html` took only --leaderboard FILE, so `html --board FOLDER`, the board as submit and
    audit take it, was an unrecognized-argument error; --leaderboard FILE still works."""
    copy = tmp_path / "board"
    shutil.copytree(board, copy)
    written = copy / "leaderboard" / "index.html"
    written.unlink()
    assert main(["leaderboard", "html", "--board", str(copy)]) == 0
    assert f"page: {written} " in capsys.readouterr().out
    assert [row["id"] for row in _rows(written)] == [row["id"] for row in _rows(page)]

    older = tmp_path / "older.html"
    json_file = str(copy / "leaderboard.json")
    assert main(["leaderboard", "html", "--leaderboard", json_file, "--out", str(older)]) == 0
    assert [row["id"] for row in _rows(older)] == [row["id"] for row in _rows(written)]

    assert main(["leaderboard", "html", "--board", str(copy), "--leaderboard", json_file]) == 2
    assert "--board FOLDER or --leaderboard FILE, not both" in capsys.readouterr().err
    assert main(["leaderboard", "html", "--board", "results", "--leaderboard", json_file]) == 2
    assert "--board FOLDER or --leaderboard FILE, not both" in capsys.readouterr().err
    assert main(["leaderboard", "html", "--board", json_file]) == 2
    assert f"({json_file} is a file, not a board's folder)" in capsys.readouterr().err


def test_an_out_that_is_a_folder_is_refused_in_one_line(
    board: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ["leaderboard", "html", "--leaderboard", str(board / "leaderboard.json")]
    assert main([*command, "--out", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert f"--out {tmp_path} is a folder; --out names the page's file, e.g. --out " in said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["leaderboard.json", "LEADERBOARD.md"])
def test_an_out_that_is_not_an_html_file_is_refused_and_left_alone(
    board: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """`--out BOARD/leaderboard.json` replaced the board with the page, losing its audits,
    dates and verified flags; the next submit called the board corrupt."""
    target = board / name
    before = target.read_bytes()
    assert main(["leaderboard", "html", "--board", str(board), "--out", str(target)]) == 2
    said = capsys.readouterr().err
    assert f"--out {target} is not an .html file, and the page would replace it" in said
    assert target.read_bytes() == before


def _chromium() -> str:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("chromium not installed: apt-get install chromium")
    return chromium


def _load(page: Path, fragment: str, tmp_path: Path) -> tuple[str, list[str], list[str]]:
    """Open page#fragment in headless Chromium: the DOM after load, its rows' entry ids, and
    the console lines it logged (errors included)."""
    url = f"{page.resolve().as_uri()}#{fragment}"
    command = chromium_command(
        _chromium(), tmp_path / "profile", "--enable-logging=stderr", "--v=0", "--dump-dom", url
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [
        line for line in result.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line
    ]
    return result.stdout, re.findall(r'<tr data-entry="([^"]+)"', result.stdout), console


def test_chromium_shows_every_entry_without_errors_and_sorts_by_score(
    board: Path, page: Path, tmp_path: Path
) -> None:
    entries = [entry for _, entry in ranked(read_board(board).entries)]
    # 0099 ties with the fixed entry and follows it on the board: sorting keeps that order
    by_score = [e.id for e in sorted(entries, key=lambda e: -e.iqm)]
    fixed = next(e.id for e in entries if e.curriculum_label == "fixed")
    assert by_score.index("0099-0000beef") == by_score.index(fixed) + 1
    assert by_score != [e.id for e in entries]

    dom, rows, console = _load(page, "sort=score&dir=desc", tmp_path)
    assert console == [] and 'data-ready="yes"' in dom
    assert rows == by_score and "4 of 4 entries shown" in dom
    assert 'aria-sort="descending"' in dom and "<title>GameOn-RL leaderboard</title>" in dom
    assert dom.count('title="offline rule-based stand-in, not a VLM">vlm[rules]</span>') == 1
    assert '<span>x&lt;/script&gt;&lt;script&gt;document.title="pwned"' in dom
    assert f'<a href="{fixed}/curves.png">curves.png</a>' in dom
    assert '<td class="num">30 of 120 (25.0%)</td>' in dom

    _, rows, console = _load(page, "sort=score&dir=asc", tmp_path)
    assert console == []
    assert rows == [e.id for e in sorted(entries, key=lambda e: e.iqm)]

    dom, rows, console = _load(page, "learner=ppo", tmp_path)
    assert console == [] and "1 of 4 entries shown" in dom
    assert rows == [e.id for e in entries if e.learner == "ppo"]


def test_chromium_console_errors_are_caught(page: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.html"
    broken.write_text(
        page.read_text().replace('"use strict";', '"use strict"; noSuchFunction();', 1)
    )
    dom, rows, console = _load(broken, "", tmp_path)
    assert rows == [] and any("Uncaught ReferenceError" in line for line in console)
