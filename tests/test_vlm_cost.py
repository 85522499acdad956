"""Spending a real key: the call and cost estimate said before a run, and the spending cap.

Against local servers that speak the OpenAI and Gemini wire formats (tests/fake_http.py): a cap
smaller than one call's cost lets exactly one request through and the rest fall back unsent,
counted; the count reaches the state, the record and the report; no key is written anywhere.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fake_http import Scripted, ScriptedServer, gemini_reply, openai_reply

from gameon.benchmark.matrix import parse_spec
from gameon.experimenter.curriculum import task_set
from gameon.experimenter.vlm import Transcript, VLMRefused, make_backend
from gameon.experimenter.vlm.estimate import (
    collect_estimate,
    module_counts,
    online_estimate,
    prompt_sizes,
)
from gameon.experimenter.vlm.gemini_backend import GeminiBackend
from gameon.experimenter.vlm.openai_backend import OpenAIBackend
from gameon.experimenter.vlm.prompts import PROMPTS_DIR
from gameon.experimenter.vlm_curriculum import VLMCurriculum, make_vlm_curriculum

OPENAI_KEY = "sk-cost-SECRET-4321"
GEMINI_KEY = "AIza-cost-SECRET-8765"
TASKS = task_set("GameOn/MultiSkill-v0")
GOOD = json.dumps({"tasks": ["pick up the red block"], "rationale": "start small"})
OPENAI_CALL_USD = (100 * 0.15 + 20 * 0.60) / 1e6
"""one fake OpenAI answer at gpt-4o-mini's prices"""
GEMINI_CALL_USD = (100 * 0.30 + (20 + 30) * 2.50) / 1e6
"""one fake Gemini answer at gemini-2.5-flash's prices (thinking tokens billed as output)"""


def gemini_thinking_reply(content: str) -> Scripted:
    """A generateContent answer with 30 thinking tokens besides its 100 + 20."""
    return gemini_reply(content, thinking_tokens=30)


def camera(seed: int) -> np.ndarray:
    """A tiny stand-in for the scene camera."""
    return np.full((8, 12, 3), seed % 200, np.uint8)


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake keys (they must end up in no file) and no stray client configuration."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    for name in (
        "OPENAI_BASE_URL",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GEMINI_BASE_URL",
        "GOOGLE_GENAI_API_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def openai_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer("/v1/chat/completions")
    yield server
    server.close()


Provider = tuple[ScriptedServer, Callable[[str], Scripted], Callable[[Path], object], float]


@pytest.fixture(params=["openai", "gemini"])
def provider(request: pytest.FixtureRequest) -> Iterator[Provider]:
    """(server, reply, backend for a run folder, USD of one answer) of one wire format."""
    if request.param == "openai":
        server = ScriptedServer("/v1/chat/completions")

        def backend(run_dir: Path) -> object:
            return make_backend(
                "openai", "gpt-4o-mini", f"{server.url}/v1", Transcript(run_dir), retries=0
            )

        yield server, openai_reply, backend, OPENAI_CALL_USD
    else:
        server = ScriptedServer(re.compile(r"/v1(beta)?/models/gemini-2\.5-flash:.*"))

        def backend(run_dir: Path) -> object:
            return GeminiBackend(
                "gemini-2.5-flash",
                server.url,
                timeout=5.0,
                attempts=1,
                transcript=Transcript(run_dir),
            )

        yield server, gemini_thinking_reply, backend, GEMINI_CALL_USD
    server.close()


def capped(provider: Provider, run_dir: Path, max_cost: float) -> VLMCurriculum:
    _, _, backend, _ = provider
    return make_vlm_curriculum(
        TASKS, 0, backend=backend(run_dir), camera=camera, interval=None, max_cost=max_cost
    )


def assert_no_key(folder: Path, *texts: str) -> None:
    """Neither fake key is in any file under folder nor in the given texts."""
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert OPENAI_KEY.encode() not in data and GEMINI_KEY.encode() not in data, path
    for text in texts:
        assert OPENAI_KEY not in text and GEMINI_KEY not in text


@pytest.mark.parametrize("wire", ["openai", "gemini"])
def test_a_key_echoed_by_a_server_error_is_redacted_without_a_transcript(
    wire: str, caplog: pytest.LogCaptureFixture
) -> None:
    if wire == "openai":
        server = ScriptedServer("/v1/chat/completions")
        key = OPENAI_KEY
        backend: object = OpenAIBackend("gpt-4o-mini", f"{server.url}/v1", max_retries=0)
    else:
        server = ScriptedServer(re.compile(r"/v1(beta)?/models/gemini-2\.5-flash:.*"))
        key = GEMINI_KEY
        backend = GeminiBackend("gemini-2.5-flash", server.url, timeout=5.0, attempts=1)
    message = {"error": {"code": 401, "message": f"Incorrect API key provided: {key}"}}
    server.script(Scripted(401, json.dumps(message)))
    try:
        curriculum = make_vlm_curriculum(TASKS, 0, backend=backend, interval=None)
        with caplog.at_level(logging.WARNING), pytest.raises(VLMRefused) as refused:
            curriculum.consult()  # refused before any answer: the run stops
    finally:
        server.close()
    assert len(server.requests) == 1
    assert "Incorrect API key provided: ***" in str(refused.value)
    assert key not in str(refused.value) and key not in caplog.text


# -- the cap ----------------------------------------------------------------------------------


def test_a_cap_below_one_call_lets_one_request_through(
    provider: Provider, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server, reply, _, call_usd = provider
    server.script(*[reply(GOOD) for _ in range(5)])
    vlm = capped(provider, tmp_path, max_cost=call_usd / 2)
    assert vlm.consult() and vlm.source == "vlm"
    assert not vlm.consult() and vlm.source == "lp"
    assert vlm.analyse({"reach": [0.1, 0.2]}) is None
    assert vlm.propose_skill() == (None, "")
    tower = "build a tower of blue, green and red from the bottom up"
    assert vlm.plan(tower, ("red", "green", "blue")).steps is None
    assert len(server.requests) == 1
    usage = vlm.usage()
    assert usage["calls"] == 1 and usage["cost_usd"] == pytest.approx(call_usd)
    assert usage["fallbacks"] == usage["capped_calls"] == 4
    assert "cost cap" in caplog.text
    assert_no_key(tmp_path, caplog.text)


def test_the_cap_allows_calls_until_the_spend_reaches_it(
    openai_server: ScriptedServer, tmp_path: Path
) -> None:
    openai_server.script(*[openai_reply(GOOD) for _ in range(6)])
    backend = make_backend("openai", "gpt-4o-mini", f"{openai_server.url}/v1", retries=0)
    vlm = VLMCurriculum(TASKS, backend, 0, interval=None, max_cost=2.5 * OPENAI_CALL_USD)
    assert [vlm.consult() for _ in range(5)] == [True, True, True, False, False]
    assert len(openai_server.requests) == 3
    assert vlm.usage()["capped_calls"] == 2 and vlm.spent() >= vlm.max_cost


def test_a_reask_past_the_cap_is_not_sent(openai_server: ScriptedServer, tmp_path: Path) -> None:
    openai_server.script(openai_reply("{not json"), openai_reply(GOOD))
    backend = make_backend("openai", "gpt-4o-mini", f"{openai_server.url}/v1", retries=0)
    vlm = VLMCurriculum(TASKS, backend, 0, interval=None, max_cost=OPENAI_CALL_USD / 2)
    assert not vlm.consult()
    assert len(openai_server.requests) == 1
    assert vlm.usage()["capped_calls"] == vlm.usage()["fallbacks"] == 1


def test_the_capped_count_and_spend_survive_a_resume(
    openai_server: ScriptedServer, tmp_path: Path
) -> None:
    openai_server.script(openai_reply(GOOD))
    url = f"{openai_server.url}/v1"
    vlm = VLMCurriculum(
        TASKS, make_backend("openai", "gpt-4o-mini", url), 0, interval=None, max_cost=1e-6
    )
    vlm.consult()
    vlm.consult()
    state = json.loads(json.dumps(vlm.state_dict()))
    again = VLMCurriculum(
        TASKS, make_backend("openai", "gpt-4o-mini", url), 0, interval=None, max_cost=1e-6
    )
    again.load_state_dict(state)
    assert not again.consult()
    assert len(openai_server.requests) == 1
    assert again.usage()["capped_calls"] == 2 and again.usage()["calls"] == 1


def test_a_resume_counts_the_billed_calls_of_the_interrupted_iteration(
    openai_server: ScriptedServer, tmp_path: Path
) -> None:
    openai_server.script(*[openai_reply(GOOD) for _ in range(6)])
    url = f"{openai_server.url}/v1"

    def curriculum() -> VLMCurriculum:
        backend = make_backend("openai", "gpt-4o-mini", url, Transcript(tmp_path), retries=0)
        return VLMCurriculum(TASKS, backend, 0, interval=None, max_cost=2.5 * OPENAI_CALL_USD)

    run = curriculum()
    run.consult()
    saved = json.loads(json.dumps(run.state_dict()))
    run.consult()  # the next iteration's call is billed, then the run is killed before saving
    again = curriculum()
    again.load_state_dict(saved)
    assert again.spent() == pytest.approx(2 * OPENAI_CALL_USD)
    assert [again.consult() for _ in range(3)] == [True, False, False]
    assert len(openai_server.requests) == 3 and again.usage()["capped_calls"] == 2
    assert again.usage()["calls"] == 2  # the saved iteration's call and this process's
    resumed = curriculum()
    resumed.load_state_dict(json.loads(json.dumps(again.state_dict())))
    assert resumed.spent() == pytest.approx(3 * OPENAI_CALL_USD)  # nothing counted twice


def test_a_replay_stops_where_the_capped_run_did(
    openai_server: ScriptedServer, tmp_path: Path
) -> None:
    openai_server.script(*[openai_reply(GOOD) for _ in range(3)])
    url = f"{openai_server.url}/v1"
    backend = make_backend("openai", "gpt-4o-mini", url, Transcript(tmp_path / "run"))
    run = VLMCurriculum(TASKS, backend, 0, interval=None, max_cost=1.5 * OPENAI_CALL_USD)
    decided = [run.consult() for _ in range(3)]
    replay = make_backend("replay", replay_path=tmp_path / "run")
    again = VLMCurriculum(TASKS, replay, 0, interval=None, max_cost=1.5 * OPENAI_CALL_USD)
    assert [again.consult() for _ in range(3)] == decided == [True, True, False]
    assert again.usage()["capped_calls"] == run.usage()["capped_calls"] == 1
    assert again.usage()["cost_usd"] == 0 and len(openai_server.requests) == 2


UNANSWERED = ("module", "attempt", "request_hash", "raw_response", "parsed", "error", "sent")
"""what a transcript entry says of a call, the same in a run and in its replay"""


def test_a_reask_the_cap_stopped_is_in_the_transcript_as_not_sent_and_replays_the_same(
    openai_server: ScriptedServer, tmp_path: Path
) -> None:
    """The transcript had no line for it: an audit saw one invalid answer and no re-ask."""
    openai_server.script(openai_reply("{not json"), openai_reply(GOOD))
    url = f"{openai_server.url}/v1"
    backend = make_backend("openai", "gpt-4o-mini", url, Transcript(tmp_path / "run"), retries=0)
    run = VLMCurriculum(TASKS, backend, 0, interval=None, max_cost=OPENAI_CALL_USD / 2)
    assert not run.consult()
    assert len(openai_server.requests) == 1
    invalid, stopped = Transcript(tmp_path / "run").entries()
    assert invalid["raw_response"] == "{not json" and "sent" not in invalid
    assert stopped["sent"] is False and stopped["raw_response"] is None
    assert stopped["module"] == "propose" and stopped["attempt"] == 1
    assert stopped["error"].startswith("not sent: cost cap: $0.000027 spent of the")
    assert "Your previous answer was invalid" in stopped["prompt"]
    assert stopped["usage"] == {"prompt_tokens": 0, "completion_tokens": 0}
    assert Transcript(tmp_path / "run").usage().prompt_tokens == 100
    replayed_to = Transcript(tmp_path / "replayed")
    replay = make_backend("replay", transcript=replayed_to, replay_path=tmp_path / "run")
    again = VLMCurriculum(TASKS, replay, 0, interval=None, max_cost=OPENAI_CALL_USD / 2)
    assert not again.consult()
    assert again.usage()["capped_calls"] == run.usage()["capped_calls"] == 1
    replayed, recorded = replayed_to.entries(), Transcript(tmp_path / "run").entries()
    assert [[e.get(k) for k in UNANSWERED] for e in replayed] == [
        [e.get(k) for k in UNANSWERED] for e in recorded
    ]
    assert_no_key(tmp_path)


def test_a_consultation_the_cap_stops_is_in_the_transcript_and_a_replay_stops_alike(
    openai_server: ScriptedServer, tmp_path: Path
) -> None:
    """The curriculum's own cap check sent nothing and wrote nothing: the transcript showed one
    call where the run had decided on two."""
    openai_server.script(openai_reply(GOOD))
    url = f"{openai_server.url}/v1"
    backend = make_backend("openai", "gpt-4o-mini", url, Transcript(tmp_path / "run"), retries=0)
    run = VLMCurriculum(TASKS, backend, 0, interval=None, max_cost=OPENAI_CALL_USD / 2)
    assert run.consult() and not run.consult()
    assert len(openai_server.requests) == 1
    answered, stopped = Transcript(tmp_path / "run").entries()
    assert "sent" not in answered and answered["raw_response"] == GOOD
    assert stopped["sent"] is False and stopped["module"] == "propose"
    assert stopped["error"].startswith("not sent: cost cap: $")
    assert run.usage()["capped_calls"] == 1
    replayed_to = Transcript(tmp_path / "replayed")
    replay = make_backend("replay", transcript=replayed_to, replay_path=tmp_path / "run")
    again = VLMCurriculum(TASKS, replay, 0, interval=None, max_cost=OPENAI_CALL_USD / 2)
    assert again.consult() and not again.consult()
    assert again.proposal == run.proposal and again.usage()["capped_calls"] == 1
    assert [[e.get(k) for k in UNANSWERED] for e in replayed_to.entries()] == [
        [e.get(k) for k in UNANSWERED] for e in Transcript(tmp_path / "run").entries()
    ]
    assert_no_key(tmp_path)


def test_a_call_the_cap_stopped_before_its_request_was_built_is_recorded_and_replays(
    openai_server: ScriptedServer, tmp_path: Path
) -> None:
    """The entry a curriculum writes for a call it never built (no prompt, no hash) must not
    make the transcript unreplayable, nor be given as an answer."""
    openai_server.script(openai_reply(GOOD))
    url = f"{openai_server.url}/v1"
    backend = make_backend("openai", "gpt-4o-mini", url, Transcript(tmp_path), retries=0)
    run = VLMCurriculum(TASKS, backend, 0, interval=None)
    assert run.consult()
    backend.record_not_sent("propose", f"cost cap: $0.01 spent of the $0.01 cap ({OPENAI_KEY})")
    answered, stopped = Transcript(tmp_path).entries()
    assert stopped["sent"] is False and stopped["request_hash"] is None
    assert stopped["module"] == "propose" and stopped["raw_response"] is None
    assert stopped["error"] == "not sent: cost cap: $0.01 spent of the $0.01 cap (***)"
    assert_no_key(tmp_path)
    again = VLMCurriculum(TASKS, make_backend("replay", replay_path=tmp_path), 0, interval=None)
    assert again.consult() and again.proposal == run.proposal
    assert not again.consult() and again.backend.order_matches == 0  # no second answer


def test_bad_caps_are_refused_clearly() -> None:
    from gameon.experimenter.loop import LoopConfig

    with pytest.raises(ValueError, match="max_cost must be"):
        VLMCurriculum(TASKS, make_backend("rules"), 0, max_cost=0)
    with pytest.raises(ValueError, match="vlm_max_cost is only read by the vlm curriculum"):
        LoopConfig(curriculum="lp", vlm_max_cost=1.0).validate()
    for cap in (-1.0, float("nan"), float("inf")):  # nan would cap every call, silently
        with pytest.raises(ValueError, match="vlm_max_cost must be a finite amount in USD > 0"):
            LoopConfig(curriculum="vlm", vlm_max_cost=cap).validate()
        with pytest.raises(ValueError, match="max_cost must be a finite number of USD > 0"):
            VLMCurriculum(TASKS, make_backend("rules"), 0, max_cost=cap)
    unpriced = LoopConfig(
        curriculum="vlm", vlm_backend="openai", vlm_model="llama3", vlm_max_cost=1.0
    )
    with pytest.raises(ValueError, match="needs the price of 'llama3', which .*prices.toml does"):
        unpriced.validate()
    collect = {"learners": ["bc"], "env_ids": ["GameOn/Tower-v0"]}
    vlm = {"name": "vlm", "backend": "rules", "max_cost": "lots"}
    with pytest.raises(ValueError, match="spending cap of each run in USD, a number > 0"):
        parse_spec({"curricula": [vlm], "collect": collect})
    online = {"learners": ["ppo"], "env_ids": ["GameOn/Reach-v0"], "budget": {"total_timesteps": 8}}
    vlm["max_cost"] = 0.5
    with pytest.raises(ValueError, match="applies to collect runs only"):
        parse_spec({"curricula": [vlm], "online": online})
    spec = parse_spec({"curricula": [vlm], "collect": collect})
    assert spec.protocols[0].curricula[0].options["max_cost"] == 0.5


# -- the estimate -----------------------------------------------------------------------------


def test_the_estimate_counts_calls_from_the_budget_and_measures_the_prompts() -> None:
    from gameon.experimenter.loop import LoopConfig

    typical, most = module_counts(3, 32, 4, 60, 7, add_skills=True, code_skills=False)
    assert typical == {
        "propose": 3,
        "decompose": 12,
        "retrieve": 0,
        "analyse": 3,
        "add_skill": 3,
        "code_or_learn": 0,
        "write_code": 0,
    }
    assert most["decompose"] == 3 * 32 * 3 and most["retrieve"] == 3 * 32 * 8 * 3
    sizes = prompt_sizes("GameOn/MultiSkill-v0", 4)
    for module, (characters, _) in sizes.items():
        assert characters > len((PROMPTS_DIR / f"{module}.md").read_text()), module
    assert sizes["propose"][1] == sizes["analyse"][1] == 1
    config = LoopConfig(curriculum="vlm", vlm_backend="gemini", iterations=3)
    estimate = collect_estimate(config)
    assert estimate is not None and 0 < estimate.usd < estimate.most_usd
    assert collect_estimate(replace(config, vlm_backend="rules")) is None
    capped_line = collect_estimate(replace(config, vlm_max_cost=0.01)).line()
    assert "capped at $0.01 a run: at most $0.01" in capped_line


def test_the_online_estimate_counts_episodes_of_the_runs_own_length() -> None:
    pytest.importorskip("torch")
    from gameon.baselines.ppo import Args

    args = Args(
        env_id="GameOn/MultiSkill-v0",
        curriculum="vlm",
        vlm_backend="gemini",
        total_timesteps=4000,
        num_envs=1,
        vlm_interval=1,
    )
    default = online_estimate(args)
    shorter = online_estimate(replace(args, max_episode_steps=100))
    assert default is not None and shorter is not None
    assert (default.calls, shorter.calls) == (4000 // 400 + 1, 4000 // 100 + 1)


def tiny_experiment(server: ScriptedServer, run_dir: Path, *options: str) -> list[str]:
    """`gameon experiment` arguments for a vlm run on the OpenAI wire at the smallest budget."""
    return [
        "experiment",
        "--env-id", "GameOn/Reach-v0",
        "--curriculum", "vlm",
        "--backend", "openai",
        "--vlm-model", "gpt-4o-mini",
        "--vlm-base-url", f"{server.url}/v1",
        *options,
        "--iterations", "1",
        "--episodes-per-iteration", "2",
        "--seed-episodes", "2",
        "--num-updates", "20",
        "--eval-episodes-per-skill", "1",
        "--target-eval-episodes", "1",
        "--no-auto-stop",
        "--no-progress",
        "--run-dir", str(run_dir),
    ]  # fmt: skip


def test_experiment_says_calls_and_cost_before_the_first_request(
    openai_server: ScriptedServer, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("minari")
    from gameon.benchmark.report import write_report
    from gameon.cli import main
    from gameon.records import load_record

    printed = io.StringIO()

    class Snapshots(list):
        """The server's request list, noting what was printed when each request came."""

        seen: list[str] = []

        def append(self, item: object) -> None:
            self.seen.append(printed.getvalue())
            super().append(item)

    openai_server.requests = Snapshots()
    openai_server.script(openai_reply(GOOD))
    run_dir = tmp_path / "results" / "capped"
    arguments = tiny_experiment(openai_server, run_dir, "--vlm-max-cost", str(OPENAI_CALL_USD / 2))
    with redirect_stdout(printed):
        main(arguments)
    output = printed.getvalue()
    assert len(openai_server.requests) == 1
    (before,) = Snapshots.seen
    line = next(text for text in before.splitlines() if text.startswith("vlm: gpt-4o-mini"))
    assert re.search(r"about \d+ calls \(at most \d+\) in 1 run, about \$[\d.]+ \(at most", line)
    assert "capped at $" in line and "experimenter/vlm/prices.toml" in line
    assert "characters a token" in before
    state = json.loads((run_dir / "state.json").read_text())
    record = load_record(run_dir / "record.json")
    assert record.vlm.calls == 1 and record.vlm.capped_calls >= 3
    assert record.vlm.fallbacks >= record.vlm.capped_calls
    assert state["vlm"]["capped_calls"] == record.vlm.capped_calls
    assert state["curriculum"]["usage"]["capped_calls"] == record.vlm.capped_calls
    paths = write_report(tmp_path / "results")
    report = Path(paths.markdown).read_text()
    assert "VLM cost cap hit" in report and "1 of 1 runs of vlm[openai:gpt-4o-mini]" in report
    summary = json.loads(Path(paths.json).read_text())
    (group,) = summary["groups"]
    assert group["vlm"]["capped_runs"] == 1
    assert_no_key(tmp_path, output)


def test_a_refused_key_stops_the_experiment_in_one_line_and_the_same_command_resumes(
    openai_server: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Before, every call fell back: the run went on as lp under the model's label."""
    pytest.importorskip("torch")
    pytest.importorskip("minari")
    from gameon.cli import main
    from gameon.records import load_record

    refusal = {"error": {"code": 401, "message": f"Incorrect API key provided: {OPENAI_KEY}"}}
    openai_server.script(Scripted(401, json.dumps(refusal)))
    run_dir = tmp_path / "refused"
    arguments = tiny_experiment(openai_server, run_dir)
    with pytest.raises(SystemExit) as exited:
        main(arguments)
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and error.startswith("gameon: error: openai call for")
    assert "Incorrect API key provided: ***" in error and OPENAI_KEY not in error
    assert "check OPENAI_API_KEY" in error and "run the same command again to resume" in error
    assert len(openai_server.requests) == 1 and not (run_dir / "record.json").exists()
    assert json.loads((run_dir / "state.json").read_text())["iteration"] == 0

    openai_server.script(openai_reply(GOOD))
    main(arguments)
    record = load_record(run_dir / "record.json")
    assert record.extra["iterations_done"] == 1
    assert record.vlm.calls == 1 and len(openai_server.requests) >= 2
    output = capsys.readouterr().out
    fallbacks = record.vlm.fallbacks  # the unscripted calls after the proposal
    assert fallbacks >= 1
    said = (  # at the end, with where to read why
        f"vlm:      1 call answered, 1 answer used, {fallbacks} fallbacks to learning progress, "
        "why in "
        f"{run_dir / 'transcript.jsonl'}; 100 + 20 tokens, $0.000027"
    )
    assert said in output
    assert_no_key(tmp_path, output)


def test_ctrl_c_during_a_request_exits_130_with_the_call_in_the_transcript_as_interrupted(
    openai_server: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The request Ctrl-C cut off (perhaps billed) was in no transcript."""
    pytest.importorskip("torch")
    pytest.importorskip("minari")
    from gameon.cli import main

    slow = openai_reply(GOOD)
    slow.delay_s = 30.0
    openai_server.script(slow)

    def interrupt_on_request() -> None:
        deadline = time.monotonic() + 60
        while not openai_server.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        if openai_server.requests:
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_on_request, daemon=True).start()
    run_dir = tmp_path / "interrupted"
    with pytest.raises(SystemExit) as exited:
        main(tiny_experiment(openai_server, run_dir))
    assert exited.value.code == 130
    assert capsys.readouterr().err.strip() == "interrupted: run the same command again to resume"
    (cut,) = Transcript(run_dir).entries()
    assert cut["interrupted"] is True and cut["raw_response"] is None
    assert cut["module"] == "propose" and cut["error"].startswith("interrupted (Ctrl-C)")
    lines = (run_dir / "transcript.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [cut]  # one whole line, nothing torn
    assert json.loads((run_dir / "state.json").read_text())["iteration"] == 0
    assert not (run_dir / "record.json").exists()
    assert_no_key(tmp_path)


def test_bench_run_says_calls_and_cost_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("torch")
    import gameon.benchmark.runner as runner
    from gameon.benchmark.commands import main

    class Started(Exception):
        pass

    def run_matrix(*args: object, **kwargs: object) -> None:
        print("RUNS START")
        raise Started

    monkeypatch.setattr(runner, "run_matrix", run_matrix)
    spec = tmp_path / "capped.toml"
    spec.write_text(
        'name = "capped"\n'
        'curricula = [{ name = "vlm", backend = "auto", max_cost = 0.02 }]\n'
        "seeds = [0, 1]\n"
        "[collect]\n"
        'learners = ["bc"]\n'
        'env_ids = ["GameOn/Tower-v0"]\n'
        "budget = { iterations = 2, episodes_per_iteration = 4 }\n"
    )
    with pytest.raises(Started):
        main(["bench", "run", str(spec), "--results", str(tmp_path / "out"), "--no-report"])
    output = capsys.readouterr().out
    estimate = output.index("vlm: gemini-2.5-flash (gemini), about ")
    assert estimate < output.index("RUNS START")
    assert "in 2 runs" in output and "capped at $0.02 a run" in output
    assert_no_key(tmp_path, output)
