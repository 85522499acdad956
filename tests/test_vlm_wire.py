"""The vlm curriculum on the real openai and google-genai clients against local servers.

Each case scripts the server's replies (good, malformed JSON, schema violation, unknown task or
skill, 429 then success, 500s until the retry limit, a timeout) and checks what the curriculum
decided: the proposed tasks it samples from, or the learning-progress choice and a counted
fallback; the transcript's entries; and that the fake key is in no file and no log.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from fake_http import Scripted, ScriptedServer, gemini_reply, openai_reply

from gameon.experimenter.curriculum import LearningProgressCurriculum, task_set
from gameon.experimenter.vlm import GeminiBackend, Transcript, VLMRefused, make_backend
from gameon.experimenter.vlm_curriculum import (
    BackendSettingError,
    VLMCurriculum,
    make_vlm_curriculum,
)

OPENAI_KEY = "sk-wire-SECRET-789"
GEMINI_KEY = "AIza-wire-SECRET-012"
GEMINI_MODEL = "gemini-test"
TASKS = task_set("GameOn/MultiSkill-v0")
GOOD_TASKS = ["pick up the red block", "stack the green block on the blue block"]
COLOURS = ("red", "green", "blue")


def camera(seed: int) -> np.ndarray:
    """A tiny stand-in for the scene camera (the loop tests render the real one)."""
    image = np.zeros((8, 12, 3), np.uint8)
    image[seed % 8] = 200
    return image


class Provider:
    """One wire format: how to start its server, script a reply and build its backend."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "openai":
            self.server = ScriptedServer("/v1/chat/completions")
        else:
            self.server = ScriptedServer(re.compile(rf"/v1(beta)?/models/{GEMINI_MODEL}:.*"))

    def reply(self, content: str) -> Scripted:
        """A successful reply whose answer text is `content`."""
        return openai_reply(content) if self.name == "openai" else gemini_reply(content)

    def error(self, status: int) -> Scripted:
        body = {"error": {"code": status, "message": f"scripted {status}", "status": "UNAVAILABLE"}}
        return Scripted(status, json.dumps(body), {"retry-after": "0", "retry-after-ms": "1"})

    def backend(self, run_dir: Path, retries: int = 0, timeout: float = 5.0):
        transcript = Transcript(run_dir)
        if self.name == "openai":
            return make_backend(
                "openai",
                "gpt-4o-mini",
                base_url=f"{self.server.url}/v1",
                transcript=transcript,
                retries=retries,
                timeout=timeout,
            )
        return GeminiBackend(
            GEMINI_MODEL,
            base_url=self.server.url,
            timeout=timeout,
            attempts=retries + 1,
            transcript=transcript,
            initial_delay=0.01,
            max_delay=0.05,
        )

    @property
    def key(self) -> str:
        return OPENAI_KEY if self.name == "openai" else GEMINI_KEY


@pytest.fixture(params=["openai", "gemini"])
def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Provider]:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    for name in ("OPENAI_BASE_URL", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    monkeypatch.delenv("GOOGLE_GENAI_API_VERSION", raising=False)
    p = Provider(request.param)
    yield p
    p.server.close()


def curriculum(provider: Provider, run_dir: Path, **kwargs: object) -> VLMCurriculum:
    options = {"retries": 0, "timeout": 5.0}
    options.update({k: kwargs.pop(k) for k in list(kwargs) if k in options})
    backend = provider.backend(run_dir, **options)
    return make_vlm_curriculum(TASKS, 3, backend=backend, camera=camera, interval=5, **kwargs)


def proposal(tasks: list[str], rationale: str = "edge of competence") -> str:
    return json.dumps({"tasks": tasks, "rationale": rationale})


def lp_choices(n: int) -> list[str]:
    """What the background learning-progress curriculum proposes first, untouched."""
    lp = LearningProgressCurriculum(TASKS, 3)
    return [lp.propose() for _ in range(n)]


def assert_no_key(provider: Provider, run_dir: Path, logs: str) -> None:
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert provider.key.encode() not in path.read_bytes(), path
    assert provider.key not in logs
    assert all(provider.key not in path for path in provider.server.paths)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def test_good_answer_becomes_the_proposal(
    provider: Provider,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    provider.server.script(provider.reply(proposal(GOOD_TASKS)))
    vlm = curriculum(provider, tmp_path)
    picks = [vlm.propose() for _ in range(5)]
    assert vlm.proposal == GOOD_TASKS and vlm.source == "vlm" and vlm.rationale
    assert set(picks) <= set(GOOD_TASKS)
    (entry,) = Transcript(tmp_path).entries()
    assert entry["module"] == "propose" and entry["backend"] == provider.name
    assert entry["parsed"]["tasks"] == GOOD_TASKS and entry["error"] is None
    (digest,) = entry["images"]
    assert (tmp_path / "images" / f"{digest}.png").is_file()
    assert "```json" in entry["prompt"] and '"mastery_threshold"' in entry["prompt"]
    usage = vlm.usage()
    assert usage["calls"] == 1 and usage["prompt_tokens"] == 100
    assert usage["completion_tokens"] == 20 and usage["fallbacks"] == 0
    assert usage["used_answers"] == 1
    if provider.name == "openai":
        assert usage["cost_usd"] == pytest.approx((100 * 0.15 + 20 * 0.60) / 1e6)
    model = "gpt-4o-mini" if provider.name == "openai" else GEMINI_MODEL
    assert vlm.label == f"vlm[{provider.name}:{model}]", "two models of a backend never pool"
    assert_no_key(provider, tmp_path, logs.text + "".join(capsys.readouterr()))


def test_malformed_json_is_reasked_and_the_second_answer_used(
    provider: Provider,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    provider.server.script(provider.reply("{not json"), provider.reply(proposal(GOOD_TASKS[:1])))
    vlm = curriculum(provider, tmp_path)
    assert vlm.propose() == GOOD_TASKS[0]
    first, second = Transcript(tmp_path).entries()
    assert first["error"] and first["parsed"] is None and second["attempt"] == 1
    assert "Your previous answer was invalid" in second["prompt"]
    assert vlm.usage()["fallbacks"] == 0 and vlm.usage()["calls"] == 2
    assert_no_key(provider, tmp_path, logs.text + "".join(capsys.readouterr()))


@pytest.mark.parametrize(
    "wrap",
    [
        lambda answer: f"```json\n{answer}\n```",
        lambda answer: f"```\n{answer}\n```\n",
        lambda answer: f"<think>The red block first: {{easy}}.</think>\n{answer}",
        lambda answer: f"<think>\nplan\n</think>\n\n```json\n{answer}\n```",
        lambda answer: f"```json\r\n{answer}\r\n```",
        lambda answer: f"```json {answer} ```",
        lambda answer: f"the red block first</think>\n{answer}",
    ],
    ids=[
        "json fence",
        "bare fence",
        "reasoning",
        "reasoning and fence",
        "crlf fence",
        "one-line fence",
        "reasoning without its opening tag",
    ],
)
def test_json_in_a_code_fence_or_after_reasoning_is_read_without_a_reask(
    provider: Provider, tmp_path: Path, wrap: Callable[[str], str]
) -> None:
    """How local models answer when their server ignores the requested format: before, each
    such answer cost a re-ask (its prompt and image again) and, repeated, a fallback."""
    provider.server.script(provider.reply(wrap(proposal(GOOD_TASKS[:1]))))
    vlm = curriculum(provider, tmp_path)
    assert vlm.propose() == GOOD_TASKS[0] and vlm.source == "vlm"
    (entry,) = Transcript(tmp_path).entries()
    assert entry["raw_response"] == wrap(proposal(GOOD_TASKS[:1]))  # the transcript keeps it all
    assert entry["parsed"]["tasks"] == GOOD_TASKS[:1] and entry["error"] is None


def test_text_around_a_fence_is_still_reasked(provider: Provider, tmp_path: Path) -> None:
    """Only a whole answer is unwrapped: prose around the JSON may qualify or contradict it."""
    wrapped = f"Here you go:\n```json\n{proposal(GOOD_TASKS[:1])}\n```"
    provider.server.script(provider.reply(wrapped), provider.reply(proposal(GOOD_TASKS[1:])))
    vlm = curriculum(provider, tmp_path)
    assert vlm.propose() == GOOD_TASKS[1]
    first, second = Transcript(tmp_path).entries()
    assert first["parsed"] is None and second["attempt"] == 1


def test_schema_violations_until_the_limit_fall_back_to_lp(
    provider: Provider,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    bad = provider.reply(json.dumps({"rationale": "no tasks"}))
    provider.server.script(bad, bad, bad)
    vlm = curriculum(provider, tmp_path)
    picks = [vlm.propose() for _ in range(4)]
    assert picks == lp_choices(4)
    assert vlm.source == "lp" and vlm.proposal == []
    usage = vlm.usage()  # answered three times, but no answer could be used
    assert usage["fallbacks"] == 1 and usage["calls"] == 3 and usage["used_answers"] == 0
    entries = Transcript(tmp_path).entries()
    assert [e["attempt"] for e in entries] == [0, 1, 2]
    assert all("tasks" in e["error"] for e in entries)
    assert "falling back" in logs.text
    assert_no_key(provider, tmp_path, logs.text + "".join(capsys.readouterr()))


def test_unknown_task_and_unknown_skill_are_reasked(
    provider: Provider,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    provider.server.script(
        provider.reply(proposal(["juggle the red block"])),
        provider.reply(proposal(["stack the red block on the purple block"])),
        provider.reply(proposal(GOOD_TASKS)),
        provider.reply(json.dumps({"steps": ["wiggle the red one a bit"]})),
        provider.reply(json.dumps({"skill": "juggle", "instruction": "juggle red"})),
        provider.reply(json.dumps({"skill": "lift", "instruction": "pick up the red block"})),
    )
    vlm = curriculum(provider, tmp_path)
    vlm.consult()
    assert vlm.proposal == GOOD_TASKS and vlm.usage()["fallbacks"] == 0
    plan = vlm.plan("pick up the red block", COLOURS)
    (found,) = plan.retrievals
    assert (found.method, found.instruction) == ("model", "pick up the red block")
    assert plan.steps == ["pick up the red block"]
    errors = [e["error"] for e in Transcript(tmp_path).entries() if e["error"]]
    assert "cannot parse instruction 'juggle the red block'" in errors[0]
    assert "not one of the context's tasks" in errors[1]
    assert "unknown skill 'juggle'" in errors[2]
    assert_no_key(provider, tmp_path, logs.text + "".join(capsys.readouterr()))


def test_unmatched_step_is_reported_not_guessed(
    provider: Provider,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    provider.server.script(
        provider.reply(json.dumps({"steps": ["stack red on green", "do a backflip"]})),
        provider.reply(json.dumps({"skill": None, "instruction": None, "reason": "no such skill"})),
    )
    vlm = curriculum(provider, tmp_path)
    plan = vlm.plan("stack the red block on the green block", COLOURS)
    assert [r.method for r in plan.retrievals] == ["parse", "unmatched"]
    assert plan.unmatched == ["do a backflip"] and plan.steps is None
    assert plan.to_dict()["unmatched"] == ["do a backflip"]
    assert_no_key(provider, tmp_path, logs.text + "".join(capsys.readouterr()))


def test_429_then_success_is_retried_and_used(
    provider: Provider,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    provider.server.script(provider.error(429), provider.reply(proposal(GOOD_TASKS)))
    vlm = curriculum(provider, tmp_path, retries=2)
    assert vlm.consult() and vlm.proposal == GOOD_TASKS
    assert len(provider.server.requests) == 2 and vlm.usage()["fallbacks"] == 0
    (entry,) = Transcript(tmp_path).entries()
    assert entry["error"] is None
    assert_no_key(provider, tmp_path, logs.text + "".join(capsys.readouterr()))


def test_500s_until_the_retry_limit_fall_back_to_lp(
    provider: Provider,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    provider.server.script(*[provider.error(500)] * 3)
    vlm = curriculum(provider, tmp_path, retries=2)
    assert [vlm.propose() for _ in range(3)] == lp_choices(3)
    assert len(provider.server.requests) == 3
    assert vlm.usage()["fallbacks"] == 1 and vlm.usage()["calls"] == 0
    (entry,) = Transcript(tmp_path).entries()
    assert entry["raw_response"] is None and "500" in entry["error"]
    # until then the server is not asked again: a dead server costs one timeout a consultation
    assert vlm.plan("pick up the red block", COLOURS).steps is None
    assert len(provider.server.requests) == 3 and vlm.usage()["fallbacks"] == 2
    # the next consultation (interval 5) asks again and recovers
    provider.server.script(provider.reply(proposal(GOOD_TASKS)))
    picks = [vlm.propose() for _ in range(3)]
    assert picks[:2] == lp_choices(5)[3:] and picks[2] in GOOD_TASKS and vlm.source == "vlm"
    assert_no_key(provider, tmp_path, logs.text + "".join(capsys.readouterr()))


def test_timeout_falls_back_to_lp(
    provider: Provider,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    slow = provider.reply(proposal(GOOD_TASKS))
    slow.delay_s = 1.0
    provider.server.script(slow)
    vlm = curriculum(provider, tmp_path, timeout=0.3)
    assert vlm.propose() == lp_choices(1)[0]
    assert vlm.usage()["fallbacks"] == 1
    (entry,) = Transcript(tmp_path).entries()
    assert "Timeout" in entry["error"]
    assert_no_key(provider, tmp_path, logs.text + "".join(capsys.readouterr()))


REFUSALS = {
    400: r"the API key was not accepted: check (OPENAI_API_KEY|GEMINI_API_KEY)",  # Gemini's
    401: r"the API key was not accepted: check (OPENAI_API_KEY|GEMINI_API_KEY)",
    403: r"the API key may not use this model: check (OPENAI_API_KEY|GEMINI_API_KEY)",
    404: r"no such model here: check --vlm-model and, for a server of your own, --vlm-base-url",
}


@pytest.mark.parametrize("status", sorted(REFUSALS))
def test_a_key_or_model_refused_at_the_first_call_stops_the_run_saying_what_to_check(
    provider: Provider,
    tmp_path: Path,
    status: int,
    logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    """Every later call would be refused too: a run that went on would be lp under the
    model's label, its fallbacks counted, one warning per consultation."""
    body = {"error": {"code": status, "message": f"Refused: {provider.key}", "status": "DENIED"}}
    if status == 400:  # how Gemini refuses a key (HTTP 401 is OpenAI's way)
        body["error"]["details"] = [{"reason": "API_KEY_INVALID", "domain": "googleapis.com"}]
    provider.server.script(Scripted(status, json.dumps(body)))
    vlm = curriculum(provider, tmp_path, retries=2)
    with pytest.raises(VLMRefused, match=REFUSALS[status]) as refused:
        vlm.propose()
    assert f"{provider.name} call for module 'propose' failed" in str(refused.value)
    assert "Refused: ***" in str(refused.value) and provider.key not in str(refused.value)
    assert len(provider.server.requests) == 1  # no retry fixes a refusal
    (entry,) = Transcript(tmp_path).entries()
    assert entry["raw_response"] is None and str(status) in entry["error"]
    assert_no_key(provider, tmp_path, logs.text + "".join(capsys.readouterr()))


def test_a_refusal_at_the_first_call_of_a_resumed_run_stops_it_too(
    provider: Provider, tmp_path: Path
) -> None:
    """The key may have changed since the saved iterations' calls were answered."""
    provider.server.script(provider.error(401))
    vlm = curriculum(provider, tmp_path)
    vlm.load_state_dict({**vlm.state_dict(), "usage": {**vlm.usage(), "calls": 4}})
    with pytest.raises(VLMRefused, match="the API key was not accepted"):
        vlm.propose()


def test_a_state_saved_before_used_answers_were_counted_resumes_without_a_count(
    provider: Provider, tmp_path: Path
) -> None:
    provider.server.script(provider.reply(proposal(GOOD_TASKS)))
    vlm = curriculum(provider, tmp_path)
    state = vlm.state_dict()
    del state["usage"]["used_answers"]
    vlm.load_state_dict(state)
    assert vlm.propose() in GOOD_TASKS
    assert vlm.usage()["used_answers"] is None  # unknown, not the one answer since the resume


@pytest.mark.parametrize(
    "backend, url_env", [("openai", "OPENAI_BASE_URL"), ("gemini", "GOOGLE_GEMINI_BASE_URL")]
)
def test_a_resume_whose_requests_would_go_to_another_server_is_refused(
    backend: str, url_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base URL may come from the environment, not the run's config: a resume with it
    pointing elsewhere went on with another server's answers under the same label."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.setenv(url_env, "http://127.0.0.1:9/v1")
    first = make_vlm_curriculum(TASKS, 3, backend=backend, model="m", camera=camera)
    state = first.state_dict()
    again = make_vlm_curriculum(TASKS, 3, backend=backend, model="m", camera=camera)
    again.load_state_dict(state)  # the same server: resumes
    monkeypatch.setenv(url_env, "http://127.0.0.1:10/v1")
    moved = make_vlm_curriculum(TASKS, 3, backend=backend, model="m", camera=camera)
    with pytest.raises(BackendSettingError, match=f"{url_env}.* changed since the run"):
        moved.load_state_dict(state)
    del state["endpoint"]  # a state saved before the endpoint was kept
    moved.load_state_dict(state)


def test_a_bad_request_at_the_first_call_stops_the_run_and_after_an_answer_falls_back(
    provider: Provider, tmp_path: Path
) -> None:
    """A server that takes no images or no JSON-schema format answers 400 to every call: the run
    went on as lp under the model's label, exit code 0. After an answered call a 400 is one
    request the server could not take, and the run goes on."""
    provider.server.script(provider.error(400))
    vlm = curriculum(provider, tmp_path / "first")
    with pytest.raises(VLMRefused, match="check that --vlm-model takes images and a JSON-schema"):
        vlm.propose()
    provider.server.script(provider.reply(proposal(GOOD_TASKS)), provider.error(400))
    vlm = curriculum(provider, tmp_path / "later")
    picks = [vlm.propose() for _ in range(6)]  # the sixth consults again (interval 5)
    assert all(pick in GOOD_TASKS for pick in picks[:5])
    assert vlm.source == "lp" and vlm.usage()["fallbacks"] == 1


def test_a_refusal_after_an_answered_call_falls_back_like_a_dead_server(
    provider: Provider, tmp_path: Path
) -> None:
    """The settings worked once (a key revoked mid-run, a proxy's hiccup): the run goes on."""
    provider.server.script(provider.reply(proposal(GOOD_TASKS)), provider.error(401))
    vlm = curriculum(provider, tmp_path)
    picks = [vlm.propose() for _ in range(6)]  # the sixth consults again (interval 5)
    assert all(pick in GOOD_TASKS for pick in picks[:5])
    assert vlm.source == "lp" and vlm.usage()["fallbacks"] == 1 and vlm.usage()["calls"] == 1
    assert vlm.plan("pick up the red block", COLOURS).steps is None  # unsent until the next
    assert len(provider.server.requests) == 2 and vlm.usage()["fallbacks"] == 2


def test_ctrl_c_mid_request_ends_the_consultation_with_the_call_recorded_as_interrupted(
    provider: Provider, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    """Neither client turns Ctrl-C into a failure to fall back from, and the call is recorded."""
    slow = provider.reply(proposal(GOOD_TASKS))
    slow.delay_s = 5.0
    provider.server.script(slow)

    def interrupt_on_request() -> None:
        deadline = time.monotonic() + 10
        while not provider.server.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        if provider.server.requests:
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_on_request, daemon=True).start()
    vlm = curriculum(provider, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        vlm.consult()
    (cut,) = Transcript(tmp_path).entries()
    assert cut["interrupted"] is True and cut["backend"] == provider.name
    assert cut["module"] == "propose" and cut["raw_response"] is None
    assert vlm.usage()["fallbacks"] == 0 and vlm.usage()["calls"] == 0
    assert_no_key(provider, tmp_path, logs.text)


def test_a_slow_server_is_waited_for_with_the_timeout_given_by_name(
    provider: Provider, tmp_path: Path
) -> None:
    """`vlm_timeout` reaches the client: an answer 1 s late is a fallback at 0.3 s, used at 5 s."""
    model = "gpt-4o-mini" if provider.name == "openai" else GEMINI_MODEL
    url = f"{provider.server.url}/v1" if provider.name == "openai" else provider.server.url
    for timeout, source in ((0.3, "lp"), (5.0, "vlm")):
        slow = provider.reply(proposal(GOOD_TASKS))
        slow.delay_s = 1.0
        provider.server.script(slow)
        vlm = make_vlm_curriculum(
            TASKS,
            3,
            backend=provider.name,
            model=model,
            base_url=url,
            transcript=tmp_path / str(timeout),
            camera=camera,
            interval=5,
            timeout=timeout,
            retries=0,
        )
        vlm.propose()
        assert vlm.source == source, timeout


def test_timeout_and_retries_are_checked_and_only_for_backends_that_send_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    with pytest.raises(ValueError, match=r"vlm_timeout \(--vlm-timeout\) must be a number of"):
        make_backend("openai", "llava", base_url="http://127.0.0.1:9/v1", timeout=0)
    with pytest.raises(ValueError, match="> 0 and finite, or None, got inf"):
        make_backend("gemini", timeout=float("inf"))  # Gemini's client: an OverflowError
    with pytest.raises(ValueError, match=r"vlm_retries \(--vlm-retries\) must be an integer >= 0"):
        make_backend("openai", "llava", base_url="http://127.0.0.1:9/v1", retries=-1)
    with pytest.raises(
        ValueError,
        match=r"the rules backend sends no requests: vlm_timeout \(--vlm-timeout\) and "
        r"vlm_retries \(--vlm-retries\) are for",
    ):
        make_backend("rules", timeout=60)
    with pytest.raises(ValueError, match="only apply to a backend given by name"):
        make_vlm_curriculum(TASKS, backend=make_backend("rules"), timeout=60)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--vlm-timeout", "0"], "vlm_timeout (--vlm-timeout) must be a number of seconds > 0"),
        (["--vlm-retries", "-1"], "vlm_retries (--vlm-retries) must be an integer >= 0"),
        (["--vlm-timeout", "60"], "vlm_timeout (--vlm-timeout) and vlm_retries (--vlm-retries)"),
        (["--vlm-model", "llava"], "takes no model (--vlm-model) or base_url (--vlm-base-url)"),
        (
            ["--backend", "openai", "--vlm-base-url", "localhost:11434/v1"],
            "base_url (--vlm-base-url) must be an http:// or https:// URL",
        ),
        (["--backend", "replay"], "needs a transcript: give replay_path (--vlm-replay PATH)"),
        (["--backend", "claude"], "unknown VLM backend 'claude' (--vlm-backend)"),
    ],
)
def test_a_bad_vlm_setting_given_as_a_flag_is_named_by_that_flag(
    options: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The messages named only the fields (base_url), not the flags a CLI user had typed."""
    from gameon.cli import main

    arguments = ["experiment", "--curriculum", "vlm", *options, "--run-dir", str(tmp_path / "r")]
    with pytest.raises(SystemExit) as exited:
        main(arguments)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("gameon: error: ") and said in error


def test_a_transcript_beside_a_built_backend_is_refused(tmp_path: Path) -> None:
    # It was dropped: the run went on and no call was ever written to it.
    with pytest.raises(ValueError, match="transcript, .* only apply to a backend given by name"):
        make_vlm_curriculum(TASKS, backend=make_backend("rules"), transcript=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    built = make_backend("rules", transcript=Transcript(tmp_path))
    make_vlm_curriculum(TASKS, backend=built, interval=None).consult()
    assert Transcript(tmp_path).entries()
