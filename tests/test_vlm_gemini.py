"""Gemini backend against a local generateContent server: parsing, re-asks, retries, secrets."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fake_http import Scripted, ScriptedServer
from pydantic import BaseModel

from gameon.experimenter.vlm import GeminiBackend, Transcript, VLMError, VLMRefused, encode_png

FAKE_KEY = "AIza-test-SECRET-456"
MODEL = "gemini-test"
# google-genai 3.x posts to /v1/... (v1beta with GOOGLE_GENAI_API_VERSION=beta).
PATH = re.compile(rf"/v1(beta)?/models/{MODEL}:generateContent")


class Plan(BaseModel):
    """A toy answer schema."""

    skill: str
    steps: int


def answer(text: str) -> Scripted:
    """A successful generateContent reply whose only text part is `text`."""
    body = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7, "totalTokenCount": 18},
    }
    return Scripted(200, json.dumps(body))


def good(skill: str = "grasp", steps: int = 3) -> Scripted:
    return answer(json.dumps({"skill": skill, "steps": steps}))


def error_reply(status: int) -> Scripted:
    body = {"error": {"code": status, "message": f"scripted {status}", "status": "UNAVAILABLE"}}
    return Scripted(status, json.dumps(body))


class FakeGemini(ScriptedServer):
    """A scripted Gemini generateContent server on 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__(PATH)

    @property
    def base_url(self) -> str:
        return self.url


@pytest.fixture
def server() -> Iterator[FakeGemini]:
    srv = FakeGemini()
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", FAKE_KEY)
    for name in (
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GEMINI_BASE_URL",
        "GOOGLE_GENAI_API_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)


def make_backend(server: FakeGemini, run_dir: Path, **kwargs: object) -> GeminiBackend:
    opts: dict = {"timeout": 5.0, "attempts": 1, "initial_delay": 0.01, "max_delay": 0.05}
    opts.update(kwargs)
    return GeminiBackend(MODEL, base_url=server.base_url, transcript=Transcript(run_dir), **opts)


def image() -> np.ndarray:
    img = np.zeros((8, 12, 3), dtype=np.uint8)
    img[2:5, 3:9] = (200, 30, 10)
    return img


def assert_no_secret(run_dir: Path, server: FakeGemini) -> None:
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert FAKE_KEY.encode() not in path.read_bytes(), path
    assert server.paths and all(FAKE_KEY not in p for p in server.paths)


def test_good_answer_parses(server: FakeGemini, tmp_path: Path) -> None:
    server.script(good("lift", 4))
    backend = make_backend(server, tmp_path)
    plan = backend.generate("What next?", [image()], Plan, module="decompose")
    assert plan == Plan(skill="lift", steps=4)
    (entry,) = backend.transcript.entries()
    assert entry["backend"] == "gemini" and entry["model"] == MODEL
    assert entry["parsed"] == {"skill": "lift", "steps": 4} and entry["error"] is None
    assert entry["usage"] == {"prompt_tokens": 11, "completion_tokens": 7}
    assert backend.total_usage.completion_tokens == 7 and backend.calls == 1
    (path,) = server.paths
    assert PATH.fullmatch(path)
    assert server.headers[0]["x-goog-api-key"] == FAKE_KEY
    assert_no_secret(tmp_path, server)


def test_request_carries_image_and_schema(server: FakeGemini, tmp_path: Path) -> None:
    server.script(good())
    backend = make_backend(server, tmp_path)
    backend.generate("Describe", [image(), encode_png(image())], Plan, module="m")
    (req,) = server.requests
    parts = [p for c in req["contents"] for p in c["parts"]]
    inline = [p["inlineData"] for p in parts if "inlineData" in p]
    assert len(inline) == 2
    # The SDK writes `mime_type` and URL-safe base64; the API accepts either spelling.
    assert all(d.get("mimeType", d.get("mime_type")) == "image/png" for d in inline)
    for data in inline:
        standard = data["data"].replace("-", "+").replace("_", "/")
        assert base64.b64decode(standard, validate=True) == encode_png(image())
    assert {"text": "Describe"} in parts
    config = req["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == Plan.model_json_schema()


def test_malformed_json_then_good_reasks(server: FakeGemini, tmp_path: Path) -> None:
    server.script(answer("{not json"), good())
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [], Plan, module="m") == Plan(skill="grasp", steps=3)
    first, second = backend.transcript.entries()
    assert first["error"] and first["raw_response"] == "{not json"
    assert second["error"] is None and second["attempt"] == 1
    assert "Your previous answer was invalid" in second["prompt"]
    texts = [p["text"] for c in server.requests[1]["contents"] for p in c["parts"] if "text" in p]
    assert texts == [second["prompt"]]


def test_an_answer_without_text_is_billed_and_re_asked(server: FakeGemini, tmp_path: Path) -> None:
    blocked = {
        "candidates": [{"finishReason": "SAFETY", "index": 0}],
        "usageMetadata": {"promptTokenCount": 11, "thoughtsTokenCount": 5, "totalTokenCount": 16},
    }
    server.script(Scripted(200, json.dumps(blocked)), good())
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [], Plan, module="m") == Plan(skill="grasp", steps=3)
    first, second = backend.transcript.entries()
    assert first["raw_response"] == "" and "SAFETY" in first["error"]
    assert first["usage"] == {"prompt_tokens": 11, "completion_tokens": 5}
    assert "SAFETY" in second["prompt"] and second["error"] is None
    assert backend.calls == 2 and backend.total_usage.completion_tokens == 5 + 7


def test_429_then_success_is_retried_by_client(server: FakeGemini, tmp_path: Path) -> None:
    server.script(error_reply(429), good())
    backend = make_backend(server, tmp_path, attempts=3)
    assert backend.generate("Plan it", [], Plan, module="m").skill == "grasp"
    assert len(server.requests) == 2
    (entry,) = backend.transcript.entries()  # client retries are invisible: one attempt
    assert entry["error"] is None


def test_500_until_attempts_exhausted_raises(server: FakeGemini, tmp_path: Path) -> None:
    server.script(*[error_reply(500)] * 3)
    backend = make_backend(server, tmp_path, attempts=3)
    with pytest.raises(VLMError, match="ServerError"):
        backend.generate("Plan it", [], Plan, module="m")
    assert len(server.requests) == 3
    (entry,) = backend.transcript.entries()
    assert entry["raw_response"] is None and entry["parsed"] is None
    assert "ServerError" in entry["error"] and "500" in entry["error"]
    assert_no_secret(tmp_path, server)


def test_timeout_raises(server: FakeGemini, tmp_path: Path) -> None:
    slow = good()
    slow.delay_s = 1.0
    server.script(slow)
    backend = make_backend(server, tmp_path, timeout=0.3, attempts=1)
    with pytest.raises(VLMError, match="Timeout"):  # HttpOptions.timeout is in milliseconds
        backend.generate("Plan it", [], Plan, module="m")
    (entry,) = backend.transcript.entries()
    assert "Timeout" in entry["error"]
    assert_no_secret(tmp_path, server)


def test_missing_key_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="GEMINI_API_KEY") as info:
        GeminiBackend(base_url="http://127.0.0.1:1")
    assert "GOOGLE_API_KEY" in str(info.value) and "--vlm-backend rules" in str(info.value)


def test_google_api_key_also_accepted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", FAKE_KEY)
    transcript = Transcript(tmp_path)
    GeminiBackend(base_url="http://127.0.0.1:1", transcript=transcript)
    assert transcript.redact(f"k={FAKE_KEY}") == "k=***"


@pytest.mark.parametrize("url", ["localhost:1234", "127.0.0.1:1234/v1beta"])
def test_a_base_url_that_is_not_http_is_refused_naming_it(url: str) -> None:
    # Without the check every request failed in transport and fell back to lp for the whole run.
    with pytest.raises(ValueError, match=r"http:// or https://.*" + re.escape(repr(url))):
        GeminiBackend(MODEL, base_url=url)


def test_a_key_read_with_surrounding_whitespace_is_sent_without_it(
    server: FakeGemini, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key pasted with a newline or space made every request fail in transport, so the whole
    # run fell back to lp.
    monkeypatch.setenv("GEMINI_API_KEY", f" {FAKE_KEY}\n")
    server.script(good())
    backend = make_backend(server, tmp_path)
    assert backend.generate("Plan it", [], Plan, module="m") == Plan(skill="grasp", steps=3)
    assert server.headers[0]["x-goog-api-key"] == FAKE_KEY
    assert backend.transcript.redact(FAKE_KEY) == "***"


def test_a_key_a_header_cannot_carry_is_refused_before_any_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-fake-\u00e9")
    with pytest.raises(ValueError, match="the API key in GOOGLE_API_KEY has a character"):
        GeminiBackend(MODEL, base_url="http://127.0.0.1:1")


def test_negative_token_counts_from_a_server_count_as_none(
    server: FakeGemini, tmp_path: Path
) -> None:
    body = json.loads(good().body)
    body["usageMetadata"] = {
        "promptTokenCount": -55,
        "candidatesTokenCount": -9,
        "thoughtsTokenCount": 4,
    }
    server.script(Scripted(200, json.dumps(body)))
    backend = make_backend(server, tmp_path)
    backend.generate("Plan it", [], Plan, module="m")
    assert (backend.total_usage.prompt_tokens, backend.total_usage.completion_tokens) == (0, 4)


def test_a_web_page_where_the_api_should_be_is_refused_naming_the_base_url(
    server: FakeGemini, tmp_path: Path
) -> None:
    # It failed as "JSONDecodeError: Expecting value" and fell back on every call.
    server.script(Scripted(200, "<html><body>proxy login</body></html>", content_type="text/html"))
    backend = make_backend(server, tmp_path)
    with pytest.raises(VLMRefused, match=f"the server at {re.escape(server.base_url)} answered"):
        backend.generate("Plan it", [], Plan, module="m")
