"""VLM backends against a local chat-completions server: parsing, re-asks, retries, replay."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fake_http import Scripted, ScriptedServer
from pydantic import BaseModel

from gameon.experimenter.vlm import (
    GeminiBackend,
    OpenAIBackend,
    ReplayBackend,
    Transcript,
    VLMError,
    encode_png,
    redact,
    request_hash,
)
from gameon.experimenter.vlm.backend import Usage, VLMRefused, mark_abandoned

FAKE_KEY = "sk-test-SECRET-123"
KNOWN_SKILLS = {"reach", "grasp", "lift"}


class Plan(BaseModel):
    """A toy answer schema."""

    skill: str
    steps: int


def completion(content: str, prompt_tokens: int = 11, completion_tokens: int = 7) -> Scripted:
    """A successful chat.completion reply whose message content is `content`."""
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "fake-vlm",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return Scripted(200, json.dumps(body))


def error_reply(status: int) -> Scripted:
    """An API error reply the client may retry immediately."""
    body = json.dumps({"error": {"message": f"scripted {status}", "type": "server_error"}})
    return Scripted(status, body, {"retry-after": "0", "retry-after-ms": "1"})


class FakeServer(ScriptedServer):
    """A scripted OpenAI chat-completions server on 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__("/v1/chat/completions")

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL."""
        return f"{self.url}/v1"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def make_backend(server: FakeServer, run_dir: Path, **kwargs: object) -> OpenAIBackend:
    opts: dict = {"timeout": 5.0, "max_retries": 0}
    opts.update(kwargs)
    return OpenAIBackend(
        "fake-vlm", base_url=server.base_url, transcript=Transcript(run_dir), **opts
    )


def image() -> np.ndarray:
    img = np.zeros((8, 12, 3), dtype=np.uint8)
    img[2:5, 3:9] = (200, 30, 10)
    return img


def good(skill: str = "grasp", steps: int = 3) -> Scripted:
    return completion(json.dumps({"skill": skill, "steps": steps}))


def assert_no_secret(run_dir: Path) -> None:
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert FAKE_KEY.encode() not in path.read_bytes(), path


def test_good_answer_parses(server: FakeServer, tmp_path: Path) -> None:
    server.script(good("lift", 4))
    backend = make_backend(server, tmp_path)
    plan = backend.generate("What next?", [image()], Plan, module="decompose")
    assert plan == Plan(skill="lift", steps=4)
    (entry,) = backend.transcript.entries()
    assert entry["module"] == "decompose" and entry["backend"] == "openai"
    assert entry["model"] == "fake-vlm" and entry["attempt"] == 0
    assert entry["parsed"] == {"skill": "lift", "steps": 4} and entry["error"] is None
    assert entry["usage"] == {"prompt_tokens": 11, "completion_tokens": 7}
    assert backend.total_usage.prompt_tokens == 11 and backend.calls == 1
    png = encode_png(image())
    (digest,) = entry["images"]
    assert (tmp_path / "images" / f"{digest}.png").read_bytes() == png
    assert server.headers[0]["authorization"] == f"Bearer {FAKE_KEY}"
    assert_no_secret(tmp_path)


@pytest.mark.parametrize("escaped", [False, True], ids=["plain", "json-escaped"])
def test_an_answer_that_echoes_the_key_reaches_the_caller_scrubbed(
    server: FakeServer, tmp_path: Path, escaped: bool
) -> None:
    """Whatever the run keeps of an answer (a rationale in its state) never holds the key, also
    when the answer's JSON writes it with \\u escapes: scrubbed in the raw text only, it came out
    of the parser whole and went to state.json, curriculum.json and the checkpoint."""
    key = FAKE_KEY.replace("-", "\\u002d") if escaped else FAKE_KEY
    server.script(completion('{"skill": "grasp with Bearer ' + key + '", "steps": 4}'))
    backend = make_backend(server, tmp_path)
    plan = backend.generate("What next?", [], Plan, module="decompose")
    assert plan.skill == "grasp with Bearer ***"
    (tmp_path / "state.json").write_text(json.dumps(plan.model_dump()))
    assert_no_secret(tmp_path)


def test_request_carries_image_and_schema(server: FakeServer, tmp_path: Path) -> None:
    server.script(good())
    backend = make_backend(server, tmp_path)
    backend.generate("Describe", [image(), encode_png(image())], Plan, module="m")
    (req,) = server.requests
    assert req["model"] == "fake-vlm"
    parts = req["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": "Describe"}
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert len(urls) == 2
    prefix = "data:image/png;base64,"
    assert all(u.startswith(prefix) for u in urls)
    assert base64.b64decode(urls[0][len(prefix) :]) == encode_png(image())
    fmt = req["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"] == Plan.model_json_schema()
    assert fmt["json_schema"]["name"] == "Plan"


def test_malformed_json_then_good_reasks(server: FakeServer, tmp_path: Path) -> None:
    server.script(completion("{not json"), good())
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [], Plan, module="m") == Plan(skill="grasp", steps=3)
    first, second = backend.transcript.entries()
    assert first["error"] and first["parsed"] is None and first["raw_response"] == "{not json"
    assert second["error"] is None and second["attempt"] == 1
    assert second["prompt"].startswith("Plan it")
    assert "Your previous answer was invalid" in second["prompt"]
    assert first["error"] in second["prompt"]
    assert first["request_hash"] != second["request_hash"]
    assert server.requests[1]["messages"][0]["content"][0]["text"] == second["prompt"]


def test_an_answer_with_a_lone_surrogate_is_re_asked_and_transcribed(
    server: FakeServer, tmp_path: Path
) -> None:
    # A JSON escape of half a surrogate pair (a token cut mid-emoji) decodes to a str that
    # UTF-8 cannot encode: writing it to the transcript raised UnicodeEncodeError out of
    # generate, which the curriculum does not catch, so the run stopped.
    server.script(completion('{"skill": "\ud83d", "steps": 3}'), good())
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [], Plan, module="m") == Plan(skill="grasp", steps=3)
    first, second = backend.transcript.entries()
    assert first["raw_response"] == '{"skill": "\ud83d", "steps": 3}' and first["error"]
    assert second["error"] is None


def test_a_refusal_and_an_answer_without_choices_are_billed_and_re_asked(
    server: FakeServer, tmp_path: Path
) -> None:
    refusal = json.loads(completion("", 13, 3).body)
    refusal["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "no"}
    no_choices = {**refusal, "choices": []}
    server.script(Scripted(200, json.dumps(refusal)), Scripted(200, json.dumps(no_choices)), good())
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [], Plan, module="m") == Plan(skill="grasp", steps=3)
    first, second, third = backend.transcript.entries()
    assert first["error"] == "the answer has no text (refused: no)"
    assert second["error"] == "the response has no choices" and third["error"] is None
    assert backend.calls == 3 and backend.total_usage.prompt_tokens == 13 + 13 + 11


def test_an_answer_given_as_content_parts_is_read_from_its_text_parts(
    server: FakeServer, tmp_path: Path
) -> None:
    # A list of parts (as some servers send for reasoning models) raised AttributeError out of
    # generate, which the curriculum does not catch, so the run stopped.
    reply = json.loads(completion("").body)
    reply["choices"][0]["message"]["content"] = [
        {"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]},
        {"type": "text", "text": json.dumps({"skill": "lift", "steps": 2})},
    ]
    server.script(Scripted(200, json.dumps(reply)))
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [], Plan, module="m") == Plan(skill="lift", steps=2)


def test_schema_violation_until_limit_raises(server: FakeServer, tmp_path: Path) -> None:
    bad = completion(json.dumps({"skill": "grasp"}))  # steps missing
    server.script(bad, bad, bad)
    backend = make_backend(server, tmp_path, max_reasks=2)
    with pytest.raises(VLMError, match="after 3 attempts"):
        backend.generate("Plan it", [], Plan, module="m")
    entries = backend.transcript.entries()
    assert [e["attempt"] for e in entries] == [0, 1, 2]
    assert all("steps" in e["error"] for e in entries)
    assert len(server.requests) == 3


def test_validate_hook_rejects_unknown_skill(server: FakeServer, tmp_path: Path) -> None:
    def known(plan: Plan) -> None:
        if plan.skill not in KNOWN_SKILLS:
            raise ValueError(f"unknown skill {plan.skill!r}")

    server.script(good("juggle"), good("reach"))
    backend = make_backend(server, tmp_path)
    plan = backend.generate("Plan it", [], Plan, module="decompose", validate=known)
    assert plan.skill == "reach"
    first, second = backend.transcript.entries()
    assert "unknown skill 'juggle'" in first["error"]
    assert "unknown skill 'juggle'" in second["prompt"]


def test_429_then_success_is_retried_by_client(server: FakeServer, tmp_path: Path) -> None:
    server.script(error_reply(429), good())
    backend = make_backend(server, tmp_path, max_retries=2)
    assert backend.generate("Plan it", [], Plan, module="m").skill == "grasp"
    assert len(server.requests) == 2
    (entry,) = backend.transcript.entries()  # client retries are invisible: one attempt
    assert entry["error"] is None


def test_500_until_retry_limit_raises(server: FakeServer, tmp_path: Path) -> None:
    server.script(*[error_reply(500)] * 3)
    backend = make_backend(server, tmp_path, max_retries=2)
    with pytest.raises(VLMError, match="InternalServerError"):
        backend.generate("Plan it", [], Plan, module="m")
    assert len(server.requests) == 3
    (entry,) = backend.transcript.entries()
    assert entry["raw_response"] is None and entry["parsed"] is None
    assert "InternalServerError" in entry["error"]
    assert FAKE_KEY not in entry["error"]
    assert_no_secret(tmp_path)


def test_timeout_raises(server: FakeServer, tmp_path: Path) -> None:
    slow = good()
    slow.delay_s = 1.0
    server.script(slow)
    backend = make_backend(server, tmp_path, timeout=0.3, max_retries=0)
    with pytest.raises(VLMError, match="Timeout"):
        backend.generate("Plan it", [], Plan, module="m")
    (entry,) = backend.transcript.entries()
    assert "Timeout" in entry["error"]
    assert_no_secret(tmp_path)


def interrupt_on_request(server: FakeServer, count: int) -> None:
    """Send this process Ctrl-C (SIGINT) once the server has received `count` requests (its
    reply is still on the way); never, if they do not come within 10 s."""

    def watch() -> None:
        deadline = time.monotonic() + 10
        while len(server.requests) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        if len(server.requests) >= count:
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, daemon=True).start()


def test_a_request_cut_off_by_ctrl_c_is_recorded_as_interrupted_then_ends_the_call(
    server: FakeServer, tmp_path: Path
) -> None:
    """It was in no transcript: an audit of the run did not see the call it had made."""
    slow = good("lift", 2)
    slow.delay_s = 5.0
    server.script(good("reach", 1), slow)
    backend = make_backend(server, tmp_path)
    backend.generate("First", [], Plan, module="analyse")
    interrupt_on_request(server, 2)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        backend.generate(f"Cut off {FAKE_KEY}", [image()], Plan, module="decompose")
    assert time.monotonic() - started < 4  # not after the answer came
    first, cut = backend.transcript.entries()
    assert "interrupted" not in first
    assert cut["interrupted"] is True and cut["raw_response"] is None and cut["parsed"] is None
    assert cut["module"] == "decompose" and cut["attempt"] == 0 and len(cut["images"]) == 1
    assert cut["prompt"] == "Cut off ***" and cut["error"].startswith("interrupted (Ctrl-C)")
    assert backend.calls == 1
    assert_no_secret(tmp_path)
    replay = ReplayBackend(tmp_path)  # the run ended there: no answer, nor failure, to give
    assert replay.generate("First", [], Plan, module="analyse").steps == 1
    with pytest.raises(VLMError, match="no recorded answer for module 'decompose'"):
        replay.generate(f"Cut off {FAKE_KEY}", [image()], Plan, module="decompose")


def test_missing_key_for_remote_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MY_VLM_KEY", raising=False)
    with pytest.raises(ValueError, match="MY_VLM_KEY") as info:
        OpenAIBackend("m", base_url="https://example.invalid/v1", api_key_env="MY_VLM_KEY")
    # A server elsewhere that checks no key (vLLM on another machine) is told what to set.
    assert "takes any value: MY_VLM_KEY=sk-no-key" in str(info.value)
    # A local server needs no key.
    OpenAIBackend("m", base_url="http://127.0.0.1:1/v1", api_key_env="MY_VLM_KEY")


@pytest.mark.parametrize("url", ["localhost:11434/v1", "127.0.0.1:8000/v1", "ftp://host/v1"])
def test_a_base_url_that_is_not_http_is_refused_naming_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the check a missing scheme read as a remote server that needs a key, and with a
    # key every request failed as "Connection error." and fell back to lp for the whole run.
    with pytest.raises(ValueError, match=r"http:// or https://.*" + re.escape(repr(url))):
        OpenAIBackend("m", base_url=url)
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenAIBackend("m", base_url=url)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenAIBackend("m")


@pytest.mark.parametrize(
    "url", ["http://alice:TopSecretPassw0rd@127.0.0.1:1/v1", "https://TopSecretPassw0rd@host/v1"]
)
def test_a_base_url_carrying_credentials_is_refused_without_repeating_them(url: str) -> None:
    """A password in the URL was written to state.json, started.json and record.json (the stored
    config), and to the transcript when the server answered a page."""
    with pytest.raises(
        ValueError, match=r"base_url \(--vlm-base-url\) carries credentials"
    ) as info:
        OpenAIBackend("m", base_url=url)
    assert "TopSecretPassw0rd" not in str(info.value)


@pytest.mark.parametrize("wire", ["openai", "gemini"])
def test_a_bad_base_url_names_the_flag_it_was_given_with_or_the_variable_it_was_read_from(
    wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message said base_url where a CLI user had typed --vlm-base-url, and blamed base_url
    for a URL read from an environment variable."""
    backend, variable = (
        (OpenAIBackend, "OPENAI_BASE_URL")
        if wire == "openai"
        else (GeminiBackend, "GOOGLE_GEMINI_BASE_URL")
    )
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ValueError, match=r"^base_url \(--vlm-base-url\) must be an http://"):
        backend("m", base_url="localhost:11434/v1")
    monkeypatch.setenv(variable, "localhost:11434/v1")
    with pytest.raises(ValueError, match=rf"^{variable} must be an http://"):
        backend("m")


def test_a_key_read_with_surrounding_whitespace_is_sent_without_it(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key pasted with a newline or space made every request fail as "Connection error." (an
    # illegal header value), so the whole run fell back to lp.
    monkeypatch.setenv("OPENAI_API_KEY", f" {FAKE_KEY}\n")
    server.script(good())
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [], Plan, module="m") == Plan(skill="grasp", steps=3)
    assert server.headers[0]["authorization"] == f"Bearer {FAKE_KEY}"
    assert backend.transcript.redact(FAKE_KEY) == "***"


def test_a_key_shorter_than_a_credential_is_not_scrubbed_from_answers(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Scrubbing the placeholder key "a" rewrote every "a" of the answer before it was parsed
    # ("t***sks: Field required") and of the transcript's image hashes.
    monkeypatch.setenv("OPENAI_API_KEY", "a")
    server.script(good("grasp a block"))
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [image()], Plan, module="m").skill == "grasp a block"
    (entry,) = backend.transcript.entries()
    assert (tmp_path / "images" / f"{entry['images'][0]}.png").is_file()
    assert entry["attempt"] == 0


@pytest.mark.parametrize("key", ["sk-fake-123\u00e9", "sk-fake\n123", "sk-fake 123"])
def test_a_key_a_header_cannot_carry_is_refused_before_any_request(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every request failed as a connection error and the run fell back to lp for its whole length.
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with pytest.raises(ValueError, match="the API key in OPENAI_API_KEY has a character") as info:
        OpenAIBackend("m", base_url="https://example.invalid/v1")
    assert key not in str(info.value) and "printable ASCII" in str(info.value)


def test_negative_token_counts_from_a_server_count_as_none(
    server: FakeServer, tmp_path: Path
) -> None:
    # A negative count made the run's cost negative, which its record refused at the very end.
    server.script(completion(json.dumps({"skill": "grasp", "steps": 3}), -55, -9))
    backend = make_backend(server, tmp_path)
    backend.generate("Plan it", [], Plan, module="m")
    assert backend.total_usage == Usage(0, 0)


def test_a_web_page_where_the_api_should_be_is_refused_naming_the_base_url(
    server: FakeServer, tmp_path: Path
) -> None:
    # openai hands back the text of a non-JSON body, which failed as "AttributeError: 'str'
    # object has no attribute 'usage'" and fell back on every call.
    page = f"<html><body>Welcome, {FAKE_KEY} " + "x" * 5000 + "</body></html>"
    server.script(Scripted(200, page, content_type="text/html"), Scripted(200, '{"foo": "bar"}'))
    backend = make_backend(server, tmp_path)
    with pytest.raises(VLMRefused, match=f"the server at {re.escape(server.base_url)} answered"):
        backend.generate("Plan it", [], Plan, module="m")
    with pytest.raises(VLMRefused, match="answered JSON without `choices`, not a chat completion"):
        backend.generate("Plan it", [], Plan, module="m")
    first, _ = backend.transcript.entries()
    assert "not a chat completion: check --vlm-base-url" in first["error"]
    assert "x" * 100 not in first["error"]
    assert_no_secret(tmp_path)


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "the request exceeds the available context size", "code": 400}},
        {"error": "the request exceeds the available context size"},
    ],
)
def test_an_error_sent_with_status_200_is_quoted_not_blamed_on_the_url(
    server: FakeServer, tmp_path: Path, body: dict
) -> None:
    """The run stopped saying "JSON without `choices` ... check --vlm-base-url" though the URL
    was right, and the server's own reason was nowhere."""
    server.script(Scripted(200, json.dumps(body)))
    backend = make_backend(server, tmp_path)
    with pytest.raises(VLMRefused) as refused:
        backend.generate("Plan it", [], Plan, module="m")
    message = str(refused.value)
    assert "answered an error instead of a chat completion: 'the request exceeds the" in message
    assert "check --vlm-base-url" not in message
    (entry,) = backend.transcript.entries()
    assert "exceeds the available context size" in entry["error"]


def test_a_refusal_quoting_the_key_reaches_the_caller_scrubbed(
    server: FakeServer, tmp_path: Path
) -> None:
    # The refusal's words, which quote the start of the server's answer, went to error.txt,
    # run.log and the terminal with the key in them.
    server.script(Scripted(200, f"not json, your key is {FAKE_KEY}", content_type="text/plain"))
    backend = make_backend(server, tmp_path)
    with pytest.raises(VLMRefused) as refused:
        backend.generate("Plan it", [], Plan, module="m")
    assert FAKE_KEY not in str(refused.value) and "your key is ***" in str(refused.value)


def test_a_runaway_answer_is_reasked_and_kept_cut_short(server: FakeServer, tmp_path: Path) -> None:
    # A 20 MB answer was stored whole: a 210 MB transcript for an 11-call run.
    runaway = json.dumps({"skill": "grasp", "steps": 3, "notes": "again " * 50_000})
    server.script(completion(runaway), good("lift", 2))
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [], Plan, module="m") == Plan(skill="lift", steps=2)
    first, second = backend.transcript.entries()
    assert len(first["raw_response"]) == 2_000 and runaway.startswith(first["raw_response"])
    assert first["error"].startswith("the answer has 300,0") and first["parsed"] is None
    assert "more than the 200,000 any answer needs" in second["prompt"]
    assert backend.total_usage.prompt_tokens == 22 and backend.calls == 2


def test_cache_serves_identical_requests(server: FakeServer, tmp_path: Path) -> None:
    server.script(good("lift", 2))
    backend = make_backend(server, tmp_path, cache=True)
    a = backend.generate("Same", [image()], Plan, module="m")
    b = backend.generate("Same", [image()], Plan, module="m")
    assert a == b and len(server.requests) == 1
    # A fresh backend on the same run dir finds the answer on disk.
    again = make_backend(server, tmp_path, cache=True)
    assert again.generate("Same", [image()], Plan, module="m") == a
    assert len(server.requests) == 1
    entries = Transcript(tmp_path).entries()
    assert len(entries) == 3 and entries[1]["cached"] and entries[2]["cached"]


def test_redact_and_hash() -> None:
    assert redact(f"key={FAKE_KEY}!", [FAKE_KEY, ""]) == "key=***!"
    h = request_hash("openai", "m", "mod", "p", ["ab"], "{}")
    assert h == request_hash("openai", "m", "mod", "p", ["ab"], "{}")
    assert h != request_hash("openai", "m", "mod", "p2", ["ab"], "{}")
    assert len(h) == 64


def test_transcript_redacts_secrets(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path, secrets=[FAKE_KEY])
    transcript.append({"prompt": f"leak {FAKE_KEY}", "parsed": {"x": [FAKE_KEY]}})
    (entry,) = transcript.entries()
    assert entry == {"prompt": "leak ***", "parsed": {"x": ["***"]}}
    assert_no_secret(tmp_path)


def test_replay_reproduces_recorded_run(tmp_path: Path) -> None:
    srv = FakeServer()
    srv.script(good("reach", 1), completion("oops"), good("lift", 2), good("reach", 5))
    backend = make_backend(srv, tmp_path)
    recorded = [
        backend.generate("First", [image()], Plan, module="decompose"),
        backend.generate("Second", [], Plan, module="analyse"),
        backend.generate("First", [image()], Plan, module="decompose"),
    ]
    srv.close()
    assert [p.steps for p in recorded] == [1, 2, 5]

    replay = ReplayBackend(tmp_path / "transcript.jsonl")
    replayed = [
        replay.generate("First", [image()], Plan, module="decompose"),
        replay.generate("Second", [], Plan, module="analyse"),
        replay.generate("First", [encode_png(image())], Plan, module="decompose"),
    ]
    assert replayed == recorded
    assert replay.total_usage.prompt_tokens == 4 * 11
    with pytest.raises(VLMError, match=r"module 'novel'.*request hash [0-9a-f]{64}"):
        replay.generate("Unseen", [], Plan, module="novel")
    with pytest.raises(VLMError, match="module 'decompose'"):
        replay.generate("First", [image()], Plan, module="decompose")  # answers used up
    assert_no_secret(tmp_path)


def test_a_replay_re_asks_an_answer_without_text_as_the_run_did(
    server: FakeServer, tmp_path: Path
) -> None:
    # Replayed as the empty text "", it was re-asked with a JSON parse error instead of the
    # recorded reason, so the re-ask's prompt and hash differed and matched only by order.
    refusal = json.loads(completion("", 13, 3).body)
    refusal["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "no"}
    server.script(Scripted(200, json.dumps(refusal)), good())
    recorded = make_backend(server, tmp_path / "run").generate("Plan it", [], Plan, module="m")
    replay = ReplayBackend(tmp_path / "run", Transcript(tmp_path / "replayed"))
    assert replay.generate("Plan it", [], Plan, module="m") == recorded
    assert replay.order_matches == 0 and replay.calls == 2
    assert replay.total_usage.prompt_tokens == 13 + 11
    run, replayed = Transcript(tmp_path / "run").entries(), replay.transcript.entries()
    assert [e["prompt"] for e in replayed] == [e["prompt"] for e in run]
    assert [e["error"] for e in replayed] == [e["error"] for e in run]


def test_a_replay_refuses_a_runaway_answer_again_though_its_kept_start_is_valid(
    server: FakeServer, tmp_path: Path
) -> None:
    """Valid JSON then 250,000 newlines: the run re-asked, but the transcript keeps only the
    first 2,000 characters, valid JSON, which the replay took as the answer and went another
    way (and every re-ask after matched only by order)."""
    runaway = json.dumps({"skill": "grasp", "steps": 3}) + "\n" * 250_000
    server.script(completion(runaway), good("lift", 2))
    recorded = make_backend(server, tmp_path / "run").generate("Plan it", [], Plan, module="m")
    assert recorded == Plan(skill="lift", steps=2)
    replay = ReplayBackend(tmp_path / "run", Transcript(tmp_path / "replayed"))
    assert replay.generate("Plan it", [], Plan, module="m") == recorded
    assert replay.order_matches == 0 and replay.calls == 2
    run, replayed = Transcript(tmp_path / "run").entries(), replay.transcript.entries()
    assert [e["error"] for e in replayed] == [e["error"] for e in run]
    assert [e["raw_response"] for e in replayed] == [e["raw_response"] for e in run]


def test_a_replay_skips_the_answers_of_an_iteration_a_kill_abandoned(tmp_path: Path) -> None:
    """A resumed run asks again what its killed iteration asked: the replay must give the answers
    the run went on with, not the abandoned ones, though both have the same request hash."""
    srv = FakeServer()
    srv.script(good("reach", 1), good("lift", 2), good("lift", 3))
    backend = make_backend(srv, tmp_path)
    backend.generate("Committed", [], Plan, module="analyse")
    backend.generate("Again", [], Plan, module="propose")  # then the run is killed
    mark_abandoned(tmp_path, committed=1)  # the resumed run, before its first call
    mark_abandoned(tmp_path, committed=2)  # nothing after the committed calls: no note
    backend.generate("Again", [], Plan, module="propose")
    srv.close()
    assert len(Transcript(tmp_path).entries()) == 3  # every attempt stays (it was billed)
    replay = ReplayBackend(tmp_path)
    assert replay.generate("Committed", [], Plan, module="analyse").steps == 1
    assert replay.generate("Again", [], Plan, module="propose").steps == 3
    with pytest.raises(VLMError, match="module 'propose'"):
        replay.generate("Again", [], Plan, module="propose")


def test_an_entry_written_after_a_torn_line_is_kept_and_replayed(tmp_path: Path) -> None:
    srv = FakeServer()
    srv.script(good("reach", 1), good("lift", 2))
    backend = make_backend(srv, tmp_path)
    backend.generate("Premier café", [], Plan, module="decompose")
    path = tmp_path / "transcript.jsonl"
    line = path.read_bytes().splitlines()[0]
    with open(path, "ab") as f:  # killed while writing the next entry, inside the "é"
        f.write(line[: line.index("é".encode()) + 1])
    backend.generate("Second", [], Plan, module="analyse")
    srv.close()
    entries = Transcript(tmp_path).entries()
    assert [(e["module"], e["parsed"]["steps"]) for e in entries] == [
        ("decompose", 1),
        ("analyse", 2),
    ]
    replay = ReplayBackend(tmp_path)
    assert replay.generate("Second", [], Plan, module="analyse").steps == 2
    assert replay.generate("Premier café", [], Plan, module="decompose").steps == 1
    assert replay.order_matches == 0
