"""The leaderboard as one static, self-contained web page: `results/leaderboard/index.html`,
written from leaderboard.json by `gameon leaderboard html` and after every accepted submission.

The page needs no server and fetches nothing: the rows are embedded as a JSON script tag (with
`<`, `>` and `&` escaped, so no string can close the tag) and rendered by inline JavaScript, so it
opens from the file system. Click a column header to sort (numbers numerically, text
alphabetically, ties keep the board's order); the select boxes filter by protocol, env and
learner. The state lives in the URL fragment, which the page also reads on load, e.g.
`index.html#sort=score&dir=desc&learner=bc` (keys: sort = a column key such as rank, score,
mean, monolithic, all_skills, seeds, submitted, entry; dir = asc or desc; protocol, env,
learner = a value shown in the filters).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError

from gameon.atomic import atomic_write, file_lock
from gameon.benchmark.leaderboard import (
    BOARD_FILE,
    ENTRIES_DIR,
    LOCK_FILE,
    MARKDOWN_FILE,
    Board,
    BoardEntry,
    BoardError,
    audit_cell,
    problems_text,
    ranked,
    shown_protocol,
    vlm_cell,
    vlm_fallback_share,
)

PAGE_FILE = "index.html"
SCREENSHOT_FILE = "page.png"
DEFAULT_BOARD = Path("results") / BOARD_FILE
PLOT_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp", ".pdf")
RULES_LABEL = "vlm[rules]"
RULES_NOTE = (
    "vlm[rules] is the offline rule-based stand-in for a VLM curriculum (deterministic rules, "
    "no model is called); it is not a VLM result."
)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("rank", "rank", "num"),
    ("protocol", "protocol", "text"),
    ("env", "env", "text"),
    ("curriculum", "curriculum", "text"),
    ("learner", "learner", "text"),
    ("seeds", "seeds", "num"),
    ("score", "IQM [95% CI]", "num"),
    ("monolithic", "monolithic IQM", "num"),
    ("mean", "mean", "num"),
    ("all_skills", "all-skills IQM", "num"),
    ("episodes", "eval eps / skill", "num"),
    ("budget", "budget", "text"),
    ("vlm_fallbacks", "VLM fallbacks", "num"),
    ("verified", "verified", "text"),
    ("audited", "audited", "text"),
    ("submitted", "submitted", "text"),
    ("commit", "commit", "text"),
    ("entry", "entry: records, plots", "text"),
)
"""(key, header, kind) of each column; kind num sorts numerically, text alphabetically."""


PAGE_SUFFIXES = (".html", ".htm")
"""What --out may end in: the page is HTML, and any other file there is not one to replace."""


def write_page(leaderboard_json: Path = DEFAULT_BOARD, out: Path | None = None) -> Path:
    """Write the static page of the board in `leaderboard_json` (default: index.html in the
    board's entries folder, beside the records it links to) atomically; the page's path.
    ValueError if `out` is a folder or not an .html file (the board's own leaderboard.json or
    LEADERBOARD.md, a record: what a slip of --out would overwrite): it names the page's file."""
    leaderboard_json = Path(leaderboard_json)
    board = load_board(leaderboard_json)
    out = Path(out) if out else leaderboard_json.parent / ENTRIES_DIR / PAGE_FILE
    if out.is_dir():
        raise ValueError(
            f"--out {out} is a folder; --out names the page's file, e.g. --out {out / PAGE_FILE}"
        )
    if out.suffix.lower() not in PAGE_SUFFIXES:
        raise ValueError(
            f"--out {out} is not an .html file, and the page would replace it; --out names the "
            f"page's file, e.g. --out {out.with_suffix('.html')}"
        )
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return atomic_write(out, render_page(board, leaderboard_json.parent, out.parent, generated))


def update_page(board_dir: Path) -> Path:
    """Rewrite the page of the board in `board_dir` under the board's lock, so a page written
    after a submission never replaces a newer one (submit calls this once it is accepted)."""
    board_dir = Path(board_dir)
    with file_lock(board_dir / LOCK_FILE):
        return write_page(board_dir / BOARD_FILE)


def load_board(leaderboard_json: Path) -> Board:
    """The board in `leaderboard_json`; BoardError, saying what is wrong where, if it is missing
    or does not parse as one."""
    leaderboard_json = Path(leaderboard_json)
    if not leaderboard_json.is_file():
        found = "a folder" if leaderboard_json.is_dir() else "no such file"
        if leaderboard_json.parent.is_file():
            found = f"{leaderboard_json.parent} is a file, not a board's folder"
        raise BoardError(
            f"no leaderboard at {leaderboard_json} ({found}); give a board's folder "
            "(`gameon leaderboard submit` makes one) with --board"
        )
    try:
        return Board.model_validate_json(leaderboard_json.read_bytes())
    except (ValidationError, OSError) as error:
        raise BoardError(
            f"{leaderboard_json} is not a leaderboard, so no page is written and it is left "
            f"untouched: {problems_text(error)}"
        ) from None


def _href(target: Path, base: Path, folder: bool = False) -> str:
    """A relative, URL-quoted link from the page's folder `base` to `target`."""
    relative = Path(os.path.relpath(target.resolve(), base.resolve())).as_posix()
    return quote(relative) + ("/" if folder else "")


def _plots(folder: Path, base: Path) -> list[dict[str, str]]:
    """Links to the plot files under an entry's records folder, by name."""
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in PLOT_SUFFIXES)
    return [{"name": p.relative_to(folder).as_posix(), "href": _href(p, base)} for p in files]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def row(rank: int, entry: BoardEntry, board_dir: Path, base: Path) -> dict[str, Any]:
    """One entry as the page shows it: display text, sort values and relative links."""
    folder = board_dir / ENTRIES_DIR / entry.id
    runs = [
        {"label": f"s{run.seed}", "href": _href(board_dir / run.record, base)} for run in entry.runs
    ]
    return {
        "id": entry.id,
        "rank": rank,
        "protocol": shown_protocol(entry.protocol),
        "env": entry.env_id,
        "curriculum": entry.curriculum_label,
        "learner": entry.learner,
        "seeds": len(entry.seeds),
        "score": entry.iqm,
        "score_text": f"{entry.iqm:.2f} [{entry.ci_low:.2f}, {entry.ci_high:.2f}]",
        "mean": entry.mean,
        "monolithic": entry.monolithic_iqm,
        "monolithic_text": _number(entry.monolithic_iqm),
        "all_skills": entry.suite_iqm,
        "episodes": entry.episodes_per_skill,
        "budget": entry.budget or "-",
        "vlm_fallbacks": vlm_fallback_share(entry),
        "vlm_fallbacks_text": vlm_cell(entry),
        "verified": "yes" if entry.verified else "no",
        "audited": audit_cell(entry.audits),
        "submitted": entry.submitted[:10],
        "commit": ", ".join(sorted({run.git_commit[:7] for run in entry.runs})),
        "entry": entry.id,
        "href": _href(folder, base, folder=True),
        "runs": runs,
        "plots": _plots(folder, base),
    }


def embedded_json(data: Any) -> str:
    """JSON safe inside a <script> element: no `</script>`, `<!--` or `]]>` can appear in it."""
    text = json.dumps(data, ensure_ascii=False, indent=1)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_page(board: Board, board_dir: Path, base: Path, generated: str) -> str:
    """The page's HTML: the board's rows embedded as JSON, rendered and sorted by inline JS."""
    rows = [row(rank, entry, board_dir, base) for rank, entry in ranked(board.entries)]
    data = {
        "generated": generated,
        "rows": rows,
        "columns": [list(c) for c in COLUMNS],
        "rules": RULES_LABEL,
    }
    headers = "".join(
        f'<th data-key="{key}" data-kind="{kind}" tabindex="0" title="click to sort">'
        f"{html.escape(label)}</th>"
        for key, label, kind in COLUMNS
    )
    links = {
        "json": _href(board_dir / BOARD_FILE, base),
        "markdown": _href(board_dir / MARKDOWN_FILE, base),
    }
    values = {
        "HEADERS": headers,
        "GENERATED": html.escape(generated),
        "COUNT": str(len(rows)),
        "JSON_HREF": html.escape(links["json"]),
        "MD_HREF": html.escape(links["markdown"]),
        "RULES_NOTE": html.escape(RULES_NOTE),
        "SCRIPT": _SCRIPT,
        "DATA": embedded_json(data),
    }
    return re.sub(r"@([A-Z_]+)@", lambda match: values[match.group(1)], _TEMPLATE)


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) executable, or None if none is installed."""
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


def chromium_command(chromium: str, profile: Path, *arguments: str) -> list[str]:
    """A headless Chromium command line with its own profile folder (root needs --no-sandbox)."""
    return [
        chromium,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *arguments,
    ]


def screenshot(page: Path, out: Path, width: int = 1400, height: int = 900) -> Path:
    """A PNG of `page` as headless Chromium shows it in a `width` x `height` window."""
    chromium = find_chromium()
    if chromium is None:
        raise ValueError("a screenshot needs Chromium: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="gameon-page-") as scratch:
        image = Path(scratch) / SCREENSHOT_FILE
        command = chromium_command(
            chromium,
            Path(scratch) / "profile",
            f"--screenshot={image}",
            f"--window-size={width},{height}",
            Path(page).resolve().as_uri(),
        )
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if not image.is_file():
            raise ValueError(f"Chromium wrote no screenshot ({result.stderr.strip()[-300:]})")
        return atomic_write(out, image.read_bytes())


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GameOn-RL leaderboard</title>
<style>
body { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
  margin: 1.5em; color: #1d2330; background: #fff; }
h1 { font-size: 1.5em; margin: 0 0 .2em; }
p { margin: .3em 0; max-width: 80em; }
.meta { color: #5a6272; }
.filters { margin: .9em 0 .6em; display: flex; gap: 1.2em; align-items: center; flex-wrap: wrap; }
.filters label { font-weight: 600; }
select { font: inherit; padding: .1em .3em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
th, td { border-bottom: 1px solid #dde1e8; padding: .3em .45em; text-align: left;
  white-space: nowrap; }
th { background: #eef1f6; position: sticky; top: 0; user-select: none; white-space: normal;
  vertical-align: bottom; max-width: 7em; }
th[tabindex] { cursor: pointer; }
th[tabindex]:hover { background: #dfe5ef; }
th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: .75em; }
th[aria-sort="descending"]::after { content: " \\25BC"; font-size: .75em; }
td.num { text-align: right; }
tbody tr:nth-child(even) { background: #f8f9fb; }
tbody tr:hover { background: #eef4ff; }
.yes { color: #17702f; font-weight: 600; }
.no { color: #9a2a2a; }
.rules { border-bottom: 1px dotted #5a6272; }
td.wrap { white-space: normal; }
.files { font-size: .88em; }
.files a { margin-right: .35em; }
.note { color: #5a6272; font-size: .92em; margin-top: .8em; }
code { font-size: .95em; }
</style>
</head>
<body>
<h1>GameOn-RL leaderboard</h1>
<p class="meta">Generated <span id="generated">@GENERATED@</span> from
<a href="@JSON_HREF@">leaderboard.json</a> (also as <a href="@MD_HREF@">LEADERBOARD.md</a>);
<span id="count">@COUNT@ entries</span>.</p>
<p>Target success is recomputed from each run's evaluation episodes on the shared suite and
aggregated over seeds: interquartile mean (IQM) with a 95% stratified-bootstrap interval. Rank is
by target-success IQM, then mean, within each (protocol, env, budget); equal scores share a
rank. Collect v2 ranks the composed policy (the task as the skill library decomposes it, every
step by the learned policy) and shows the monolithic policy's IQM beside it. Click a header to
sort.</p>
<div class="filters">
<span><label for="f-protocol">protocol</label> <select id="f-protocol" data-key="protocol">
</select></span>
<span><label for="f-env">env</label> <select id="f-env" data-key="env"></select></span>
<span><label for="f-learner">learner</label> <select id="f-learner" data-key="learner">
</select></span>
</div>
<div class="scroll"><table id="board">
<thead><tr>@HEADERS@</tr></thead>
<tbody></tbody>
</table></div>
<noscript><p>This page renders its table with JavaScript; the same board is in
<a href="@MD_HREF@">LEADERBOARD.md</a>.</p></noscript>
<p class="note" id="rules-note">@RULES_NOTE@</p>
<p class="note">Verified: every checkpoint was re-evaluated on the suite at submission.
Audited: <code>gameon leaderboard audit</code> re-trained sampled runs from their records (yes when
every run audited so far reproduced its claim, over all the entry's audits, so a run that once
failed keeps it at no; runs reproduced / runs audited, date of the latest audit). Each entry
links to its records folder, one record per seed, and any plots there. VLM fallbacks: of a vlm
entry's module calls, those whose choice fell back to learning progress (the model's answer
missing, invalid or over the cost cap), sorted by their share. The view is kept in the
address fragment, e.g. <code>#sort=score&amp;dir=desc&amp;learner=bc</code>.</p>
<script type="application/json" id="board-data">@DATA@</script>
<script>@SCRIPT@</script>
</body>
</html>
"""

_SCRIPT = """
"use strict";
(function () {
  var data = JSON.parse(document.getElementById("board-data").textContent);
  var RULES = data.rules;
  var columns = data.columns;
  var kinds = {};
  columns.forEach(function (c) { kinds[c[0]] = c[2]; });
  var rows = data.rows.map(function (r, i) { r.order = i; return r; });
  var filters = ["protocol", "env", "learner"];
  var state = { sort: null, dir: "asc", protocol: "", env: "", learner: "" };
  var tbody = document.querySelector("#board tbody");

  function text(parent, tag, content, cls) {
    var el = document.createElement(tag);
    el.textContent = content;
    if (cls) { el.className = cls; }
    parent.appendChild(el);
    return el;
  }

  function link(parent, label, href) {
    var a = text(parent, "a", label);
    a.setAttribute("href", href);
    return a;
  }

  function cell(tr, key, r) {
    var td = document.createElement("td");
    tr.appendChild(td);
    if (kinds[key] === "num") { td.className = "num"; }
    if (r[key + "_text"] !== undefined) { td.textContent = r[key + "_text"]; }
    else if (key === "mean" || key === "all_skills") { td.textContent = r[key].toFixed(2); }
    else if (key === "verified") { text(td, "span", r.verified, r.verified); }
    else if (key === "curriculum") {
      var label = text(td, "span", r.curriculum);
      if (r.curriculum === RULES) {
        label.className = "rules";
        label.title = "offline rule-based stand-in, not a VLM";
      }
    }
    else if (key === "entry") {
      link(td, r.id, r.href);
      var files = text(td, "div", "", "files");
      r.runs.forEach(function (run) { link(files, run.label, run.href).title = "record.json"; });
      r.plots.forEach(function (plot) { link(files, plot.name, plot.href); });
    }
    else if (key === "commit") { td.textContent = r.commit; td.className = "wrap"; }
    else { td.textContent = String(r[key]); }
  }

  function compare(a, b) {
    var key = state.sort, x = a[key], y = b[key];
    var sign = state.dir === "desc" ? -1 : 1;
    if (x === null && y === null) { return a.order - b.order; }
    if (x === null) { return 1; }
    if (y === null) { return -1; }
    var c = kinds[key] === "num" ? x - y : String(x).localeCompare(String(y));
    return c !== 0 ? sign * c : a.order - b.order;
  }

  function writeHash() {
    var params = new URLSearchParams();
    if (state.sort) { params.set("sort", state.sort); params.set("dir", state.dir); }
    filters.forEach(function (f) { if (state[f]) { params.set(f, state[f]); } });
    try { history.replaceState(null, "", "#" + params.toString()); } catch (e) { }
  }

  function render() {
    var shown = rows.filter(function (r) {
      return filters.every(function (f) { return !state[f] || r[f] === state[f]; });
    });
    if (state.sort) { shown = shown.slice().sort(compare); }
    tbody.textContent = "";
    shown.forEach(function (r) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-entry", r.id);
      columns.forEach(function (c) { cell(tr, c[0], r); });
      tbody.appendChild(tr);
    });
    document.querySelectorAll("#board th").forEach(function (th) {
      var key = th.getAttribute("data-key");
      if (key === state.sort) {
        th.setAttribute("aria-sort", state.dir === "desc" ? "descending" : "ascending");
      } else { th.removeAttribute("aria-sort"); }
    });
    document.getElementById("count").textContent =
      shown.length + " of " + rows.length + " entries shown";
    document.getElementById("board").setAttribute("data-ready", "yes");
  }

  function sortBy(key) {
    if (state.sort === key) { state.dir = state.dir === "asc" ? "desc" : "asc"; }
    else { state.sort = key; state.dir = kinds[key] === "num" && key !== "rank" ? "desc" : "asc"; }
    writeHash();
    render();
  }

  function readHash() {
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    var key = params.get("sort");
    if (key && kinds[key]) {
      state.sort = key;
      state.dir = params.get("dir") === "desc" ? "desc" : "asc";
    }
    filters.forEach(function (f) {
      var value = params.get(f);
      var select = document.getElementById("f-" + f);
      var known = Array.prototype.some.call(select.options, function (o) {
        return o.value === value;
      });
      state[f] = value && known ? value : "";
      select.value = state[f];
    });
  }

  filters.forEach(function (f) {
    var select = document.getElementById("f-" + f);
    var values = Array.from(new Set(rows.map(function (r) { return r[f]; }))).sort();
    text(select, "option", "all").value = "";
    values.forEach(function (v) { text(select, "option", v).value = v; });
    select.addEventListener("change", function () {
      state[f] = select.value;
      writeHash();
      render();
    });
  });
  document.querySelectorAll("#board th[tabindex]").forEach(function (th) {
    var key = th.getAttribute("data-key");
    th.addEventListener("click", function () { sortBy(key); });
    th.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sortBy(key); }
    });
  });
  window.addEventListener("hashchange", function () { readHash(); render(); });
  readHash();
  render();
})();
"""
