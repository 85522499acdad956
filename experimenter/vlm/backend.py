"""The VLM backend interface: validated JSON answers, re-asks, transcript and cache."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import numpy as np
from pydantic import BaseModel, ValidationError

from gameon.atomic import atomic_write

T = TypeVar("T", bound=BaseModel)
ImageLike = bytes | np.ndarray

REASK_TEMPLATE = (
    "\n\nYour previous answer was invalid: {error}; answer again with JSON matching the schema."
)


WRAPPED_JSON = re.compile(
    r"""\s* (?: (?:<think>)? .*? </think> \s* )?           # a reasoning block first
    (?: ```(?:json)?\s* (?P<fenced>[{\[].*?) \s*```       # one markdown code fence
      | (?P<bare>.*?) ) \s*""",
    re.DOTALL | re.IGNORECASE | re.VERBOSE,
)
"""An answer as models wrap its JSON: after their reasoning in <think>...</think> (or only its
closing tag, when the chat template wrote the opening one), inside one markdown code fence
(```json ... ```, on one line or many, LF or CRLF), or both, when a server ignores the requested
format."""


def answer_json(raw: str) -> str:
    """The JSON text of an answer: without a leading reasoning block, and unwrapped from a code
    fence that holds the whole rest of it (text around a fence is left, and fails to parse)."""
    match = WRAPPED_JSON.fullmatch(raw)  # always matches: `bare` takes whatever is not fenced
    return match.group("fenced") if match.group("fenced") is not None else match.group("bare")


class VLMError(Exception):
    """A VLM call that failed for good (after retries and re-asks)."""


class VLMUnreachable(VLMError):
    """A request that got no answer after the client's retries (connection refused, timeout,
    HTTP errors): the caller stops asking until its next consultation."""


class VLMRefused(VLMUnreachable):
    """A request the server refused for a reason no retry fixes: the API key (HTTP 401, 403,
    Gemini's 400 API_KEY_INVALID) or the model's name or the server's URL (HTTP 404). Raised to
    the run when no call has been answered since it started or resumed (its settings are wrong,
    so every call would fail); later, a fallback."""


REFUSED_HINTS = {
    400: "the server refused the request itself: check that --vlm-model takes images and a "
    "JSON-schema response format (a text-only model, or a server without structured output, "
    "refuses every call) and that the prompt fits its context",
    401: "the API key was not accepted: check {key_source}",
    403: "the API key may not use this model: check {key_source} and the key's access",
    404: "no such model here: check --vlm-model and, for a server of your own, --vlm-base-url "
    "(an OpenAI-compatible server's usually ends in /v1)",
}
"""What to check, by the HTTP status of a refused request ({key_source}: where the key was read)."""


def refusal(error: BaseException) -> int | None:
    """The REFUSED_HINTS status of a client library's error (openai's `status_code`,
    google-genai's `code`; Gemini's HTTP 400 API_KEY_INVALID, on either wire, counts as 401, any
    other 400 is a request the server cannot take), or None for any other failure (a timeout, a
    refused connection, a server error, a rate limit)."""
    for name in ("status_code", "code"):
        status = getattr(error, name, None)
        if isinstance(status, int) and not isinstance(status, bool):
            if status == 400 and "API_KEY_INVALID" in f"{error} {getattr(error, 'body', '')}":
                return 401
            return status if status in REFUSED_HINTS else None
    return None


class CostCapReached(VLMError):
    """A request not sent because the run's spending cap is reached (the caller falls back)."""


@dataclass(frozen=True)
class Usage:
    """Token counts of one call (or a running total)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @classmethod
    def reported(cls, prompt_tokens: object, completion_tokens: object) -> Usage:
        """The counts a server reported, a missing or negative one as 0 (a negative count would
        make the run's cost negative, which no record accepts and no cost cap ever reaches)."""
        return cls(max(0, int(prompt_tokens or 0)), max(0, int(completion_tokens or 0)))

    def __add__(self, other: Usage) -> Usage:
        """Sum two usages."""
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


class EmptyAnswer(Exception):
    """Raised by a backend's `_complete` for a response served without answer text (a safety
    block, a refusal, a token limit). Unlike a transport failure it was billed and says nothing
    about the server being down, so `generate` counts it as a call with its usage and re-asks it
    like an invalid answer, showing `reason`."""

    def __init__(self, reason: str, usage: Usage) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage


BASE_URL_SETTING = "base_url (--vlm-base-url)"
"""How errors name the base URL a caller gave: the backends' argument and the command's flag."""


def check_base_url(url: str, source: str = BASE_URL_SETTING) -> None:
    """Refuse a model server's base URL that is not http(s) with a host (e.g.
    "localhost:11434/v1" without its scheme): every request to it would fail in transport, each
    failure a fallback, and the run would go on as lp under the model's label. A URL carrying a
    user or password is refused too: it would be written to the run's files. `source` names
    where the URL was given (an environment variable when no base_url was)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(
            f"{source} must be an http:// or https:// URL with a host, such as "
            f"http://localhost:11434/v1, got {url!r}"
        )
    if parsed.username is not None or parsed.password is not None:
        bare = parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl()
        raise ValueError(
            f"{source} carries credentials before its host ({bare} with a user or password): "
            "run records, states and transcripts keep the URL, so give the key in the backend's "
            "API key variable (OPENAI_API_KEY, GEMINI_API_KEY) and the URL without it"
        )


MAX_ANSWER_CHARS = 200_000
"""Longer answers are re-asked (billed) and cut to KEPT_CHARS in the transcript, whose entry keeps
the length as `answer_chars` (a replay pads the cut answer back to it): the longest
module's answer, a coded skill's source, runs to a few thousand characters, and a runaway one (a
model repeating itself, a server padding its answer) would otherwise be stored whole."""
KEPT_CHARS = 2_000

MIN_SECRET_LENGTH = 8
"""Keys shorter than this are placeholders for a server that checks none (`sk-no-key` is 9), not
credentials (providers' keys run to dozens of characters), and are not scrubbed: scrubbing a key
"a" rewrote every "a" of every answer before it was parsed, and the transcript's hashes with it."""


def redact(text: str, secrets: Sequence[str]) -> str:
    """Replace every occurrence of any secret of MIN_SECRET_LENGTH or more in text by "***"."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET_LENGTH:
            text = text.replace(secret, "***")
    return text


def read_key(variable: str) -> str:
    """The API key in the environment variable (empty if unset), without surrounding whitespace
    (a pasted newline); ValueError if a character inside it cannot go in an HTTP header, where
    every request would fail as a connection error and the run fall back for its whole length."""
    key = os.environ.get(variable, "").strip()
    for position, character in enumerate(key, start=1):
        if not "!" <= character <= "~":
            raise ValueError(
                f"the API key in {variable} has a character an HTTP header cannot carry at "
                f"position {position} of {len(key)} ({unicodedata.name(character, 'a control')} "
                "character): keys are printable ASCII without spaces; set it again from its "
                "source"
            )
    return key


def _redact_obj(obj: Any, secrets: Sequence[str]) -> Any:
    """Redact every string inside a JSON-like object."""
    if isinstance(obj, str):
        return redact(obj, secrets)
    if isinstance(obj, dict):
        return {redact(str(k), secrets): _redact_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_redact_obj(v, secrets) for v in obj]
    return obj


def encode_png(image: ImageLike) -> bytes:
    """Return PNG bytes for PNG bytes or a uint8 HxWx3 array."""
    if isinstance(image, bytes | bytearray):
        return bytes(image)
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] not in (3, 4):
        raise ValueError(f"image must be uint8 HxWx3, got {array.dtype} {array.shape}")
    import imageio.v3 as iio

    return bytes(iio.imwrite("<bytes>", array, extension=".png"))


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def request_hash(
    backend: str,
    model: str,
    module: str,
    prompt: str,
    image_hashes: Sequence[str],
    schema_json: str,
) -> str:
    """Sha256 of the canonical JSON of a request."""
    canonical = json.dumps(
        {
            "backend": backend,
            "model": model,
            "module": module,
            "prompt": prompt,
            "images": list(image_hashes),
            "schema": schema_json,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return sha256_hex(canonical.encode("utf-8"))


TRANSCRIPT_FILE = "transcript.jsonl"


class Transcript:
    """Append-only JSONL record of every VLM call, with images stored once by hash."""

    def __init__(self, run_dir: str | Path, secrets: Sequence[str] = ()) -> None:
        """Open (create) run_dir/transcript.jsonl; secrets are scrubbed from every string."""
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / TRANSCRIPT_FILE
        self.images_dir = self.run_dir / "images"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._secrets: list[str] = [s for s in secrets if s]
        self._lock = threading.Lock()

    def add_secret(self, secret: str) -> None:
        """Also scrub this value from everything written from now on."""
        if secret and secret not in self._secrets:
            self._secrets.append(secret)

    def redact(self, text: str) -> str:
        """Scrub the known secrets from text."""
        return redact(text, self._secrets)

    def redact_data(self, data: Any) -> Any:
        """Scrub the known secrets from every string of JSON-like data."""
        return _redact_obj(data, self._secrets)

    def save_image(self, png: bytes) -> str:
        """Write the PNG once to images/{sha256}.png (atomically); return its hash."""
        digest = sha256_hex(png)
        target = self.images_dir / f"{digest}.png"
        if target.exists():
            return digest
        atomic_write(target, png)
        return digest

    def append(self, entry: dict[str, Any]) -> None:
        """Append one redacted entry as a JSON line, flushed and fsynced.

        A file left ending mid-line (a write torn off by a kill) gets a newline first, so the
        entry gets a line of its own: the fragment stays as an unreadable line that readers
        skip, and every complete entry before and after it stays readable. A lone surrogate (an
        answer's escape of half an emoji), which UTF-8 cannot encode, is written as its JSON
        escape, so it reads back as it came.
        """
        line = json.dumps(_redact_obj(entry, self._secrets), ensure_ascii=False)
        with self._lock:
            start = "\n" if _ends_mid_line(self.path) else ""
            with open(self.path, "a", encoding="utf-8", errors="backslashreplace") as f:
                f.write(start + line + "\n")
                f.flush()
                os.fsync(f.fileno())

    def entries(self) -> list[dict[str, Any]]:
        """Read all entries back (torn lines are skipped, see read_entries)."""
        return read_entries(self.path)

    def usage(self) -> Usage:
        """The token usage of every call recorded, summed (cached answers recorded none)."""
        total = Usage()
        for entry in self.entries():
            total = total + entry_usage(entry)
        return total


RESUME_KIND = "resume"
"""The `kind` of a transcript line that is not a call: a resumed run's note that the calls from
index `abandoned[0]` to `abandoned[1]` were made by an iteration whose state was never committed."""


def _lines(path: Path) -> list[dict[str, Any]]:
    """Every JSON object line of a transcript; a line torn by a kill mid-write is skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().split(b"\n"):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def read_entries(path: str | Path) -> list[dict[str, Any]]:
    """The calls of a transcript.jsonl, every attempt of the run (abandoned ones too: they were
    billed; unanswered ones too: see `answered`); a line torn by a kill mid-write is skipped, not
    fatal."""
    return [entry for entry in _lines(Path(path)) if entry.get("kind") != RESUME_KIND]


def answered(entry: dict[str, Any]) -> bool:
    """Whether a call got to an end a replay can give again: not one the cost cap stopped unsent
    (`"sent": false`) nor one Ctrl-C cut off before its answer (`"interrupted": true`)."""
    return entry.get("sent") is not False and entry.get("interrupted") is not True


def replayable_entries(path: str | Path) -> list[dict[str, Any]]:
    """The calls whose answers the run went on with: `read_entries` without those of iterations
    that a kill abandoned and the resumed run made again (see `mark_abandoned`), and without the
    calls that got no answer (`answered`), which are no answers to give (the replayed run's own
    cap stops it where the run's did)."""
    lines = _lines(Path(path))
    abandoned = set()
    for entry in lines:
        if entry.get("kind") == RESUME_KIND:
            abandoned.update(range(*entry["abandoned"]))
    calls = [entry for entry in lines if entry.get("kind") != RESUME_KIND]
    return [
        entry for index, entry in enumerate(calls) if index not in abandoned and answered(entry)
    ]


def mark_abandoned(run_dir: str | Path, committed: int) -> None:
    """Note in run_dir's transcript that its calls from index `committed` on belong to an
    iteration that was never committed (a resumed run makes them again), if there are any."""
    transcript = Transcript(run_dir)
    found = len(transcript.entries())
    if found > committed:
        transcript.append({"kind": RESUME_KIND, "abandoned": [committed, found]})


def _ends_mid_line(path: Path) -> bool:
    """Whether the file exists, is not empty and its last byte is not a newline."""
    if not path.exists():
        return False
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


class Backend(ABC):
    """A VLM that answers a prompt plus images with JSON validated against a pydantic model."""

    def __init__(
        self,
        name: str,
        model: str,
        transcript: Transcript | None = None,
        max_reasks: int = 2,
        cache: bool = False,
    ) -> None:
        """Set identity, transcript, re-ask limit and whether identical requests are cached."""
        self.name = name
        self.model = model
        self.transcript = transcript
        self.max_reasks = max_reasks
        self.cache = cache
        self.calls = 0
        self.valid_answers = 0
        """valid answers `generate` returned, cached ones included"""
        self.total_usage = Usage()
        self._cache: dict[str, str] = {}
        self._cache_read = False
        self._secrets: list[str] = []
        self.cost_cap: Callable[[], str | None] | None = None
        """asked before every request; a reason (e.g. the cap is spent) stops the call unsent"""
        self.key_source = "the API key"
        """where the API key was read (an environment variable), named when a server refuses it"""

    @abstractmethod
    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        """Send one request; return the raw text answer and its token usage."""

    def _complete_request(
        self, prompt: str, images: list[bytes], schema: dict, req_hash: str, module: str
    ) -> tuple[str, Usage]:
        """Send one request knowing its hash and module (replay needs them); calls _complete."""
        return self._complete(prompt, images, schema)

    def _hash_identity(self) -> tuple[str, str]:
        """The (backend, model) pair that request hashes are computed with."""
        return self.name, self.model

    def add_secret(self, secret: str) -> None:
        """Scrub this value (an API key) from every error and transcript entry of this backend,
        with or without a transcript."""
        if secret and secret not in self._secrets:
            self._secrets.append(secret)
        if self.transcript is not None:
            self.transcript.add_secret(secret)

    def _redact(self, text: str) -> str:
        """Scrub the backend's secrets and the transcript's (it may be made with its own)."""
        text = redact(text, self._secrets)
        return self.transcript.redact(text) if self.transcript is not None else text

    def _redact_data(self, data: Any) -> Any:
        """Scrub the backend's and the transcript's secrets from every string of parsed data."""
        data = _redact_obj(data, self._secrets)
        return self.transcript.redact_data(data) if self.transcript is not None else data

    def _cached_raw(self, req_hash: str) -> str | None:
        """A previous successful raw answer to the same request, if caching is on."""
        if not self.cache:
            return None
        if not self._cache_read and self.transcript is not None:  # once: later answers add here
            for entry in self.transcript.entries():
                if entry.get("error") is None and entry.get("parsed") is not None:
                    self._cache.setdefault(entry["request_hash"], entry["raw_response"])
        self._cache_read = True
        return self._cache.get(req_hash)

    def _record(self, **fields: Any) -> None:
        """Append one attempt to the transcript (if any), scrubbed of the backend's secrets too
        (the transcript scrubs its own as it appends)."""
        if self.transcript is not None:
            self.transcript.append(
                _redact_obj(
                    {
                        "module": fields.pop("module"),
                        "backend": self.name,
                        "model": self.model,
                        **fields,
                    },
                    self._secrets,
                )
            )

    def record_not_sent(
        self, module: str, reason: str, request: dict[str, Any] | None = None
    ) -> None:
        """Record a call the cost cap stopped unsent (`"sent": false`, the reason as its error),
        so the transcript holds every call the run decided to make; `request`: its prompt,
        images, attempt and hash, when the request was built before the cap stopped it."""
        unbuilt = {"prompt": None, "images": [], "attempt": 0, "request_hash": None}
        self._record(
            **{**unbuilt, **(request or {}), "module": module},
            raw_response=None,
            parsed=None,
            error=f"not sent: {reason}",
            sent=False,
            latency_s=0.0,
            usage=_usage_dict(Usage()),
        )

    def generate(
        self,
        prompt: str,
        images: Sequence[ImageLike],
        schema_model: type[T],
        module: str,
        validate: Callable[[T], None] | None = None,
    ) -> T:
        """Ask for a JSON answer matching schema_model; re-ask on invalid answers."""
        pngs = [encode_png(image) for image in images]
        if self.transcript is not None:
            image_hashes = [self.transcript.save_image(png) for png in pngs]
        else:
            image_hashes = [sha256_hex(png) for png in pngs]
        schema = schema_model.model_json_schema()
        schema_json = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        backend_id, model_id = self._hash_identity()

        current_prompt = prompt
        last_error = ""
        for attempt in range(self.max_reasks + 1):
            req_hash = request_hash(
                backend_id, model_id, module, current_prompt, image_hashes, schema_json
            )
            base = {
                "module": module,
                "prompt": current_prompt,
                "images": image_hashes,
                "attempt": attempt,
                "request_hash": req_hash,
            }
            raw = self._cached_raw(req_hash)
            cached = raw is not None
            usage = Usage()
            unusable = ""  # why an answer served and billed cannot be read
            start = time.perf_counter()
            if raw is None:
                reason = None if self.cost_cap is None else self.cost_cap()
                if reason is not None:
                    self.record_not_sent(module, reason, base)
                    raise CostCapReached(self._redact(f"{module!r} not sent: {reason}"))
                try:
                    raw, usage = self._complete_request(
                        current_prompt, pngs, schema, req_hash, module
                    )
                except EmptyAnswer as served:  # served and billed, but nothing to parse
                    raw, usage, unusable = "", served.usage, served.reason
                except KeyboardInterrupt:  # recorded, then the run ends as Ctrl-C ends it
                    self._record(
                        **base,
                        raw_response=None,
                        parsed=None,
                        error="interrupted (Ctrl-C) before the answer came",
                        interrupted=True,
                        latency_s=time.perf_counter() - start,
                        usage=_usage_dict(usage),
                    )
                    raise
                except Exception as exc:  # transport failure after the client's own retries
                    message = self._redact(f"{type(exc).__name__}: {exc}")
                    self._record(
                        **base,
                        raw_response=None,
                        parsed=None,
                        error=message,
                        latency_s=time.perf_counter() - start,
                        usage=_usage_dict(usage),
                    )
                    if isinstance(exc, VLMError):  # its words may quote the server's answer
                        raise type(exc)(self._redact(str(exc))) from None
                    failure = f"{self.name} call for module {module!r} failed: {message}"
                    status = refusal(exc)
                    if status is not None:
                        hint = REFUSED_HINTS[status].format(key_source=self.key_source)
                        raise VLMRefused(f"{failure} ({hint})") from None
                    raise VLMUnreachable(failure) from None
                raw = self._redact(raw)  # an answer that echoes a key neither parses nor logs it
                if len(raw) > MAX_ANSWER_CHARS and not unusable:
                    unusable = (
                        f"the answer has {len(raw):,} characters, more than the "
                        f"{MAX_ANSWER_CHARS:,} any answer needs (the transcript keeps its first "
                        f"{KEPT_CHARS:,})"
                    )
                    base["answer_chars"] = len(raw)  # a replay answers this length again
                    raw = raw[:KEPT_CHARS]
                self.calls += 1
                self.total_usage = self.total_usage + usage
            latency = time.perf_counter() - start
            try:
                if unusable:
                    raise ValueError(unusable)
                answer = schema_model.model_validate_json(answer_json(raw))
                parsed = answer.model_dump(mode="json")
                scrubbed = self._redact_data(parsed)  # a key JSON-escaped in the raw text
                if scrubbed != parsed:
                    answer = schema_model.model_validate(scrubbed)
                if validate is not None:
                    validate(answer)
            except (ValidationError, ValueError) as exc:
                last_error = self._redact(_short_error(exc))
                self._record(
                    **base,
                    raw_response=raw,
                    parsed=None,
                    error=last_error,
                    latency_s=latency,
                    usage=_usage_dict(usage),
                )
                if cached:
                    self._cache.pop(req_hash, None)
                current_prompt = prompt + REASK_TEMPLATE.format(error=last_error)
                continue
            entry = dict(
                base,
                raw_response=raw,
                parsed=answer.model_dump(mode="json"),
                error=None,
                latency_s=latency,
                usage=_usage_dict(usage),
            )
            if cached:
                entry["cached"] = True
            self._record(**entry)
            if self.cache:
                self._cache[req_hash] = raw
            self.valid_answers += 1
            return answer
        raise VLMError(
            f"{self.name} gave no valid {schema_model.__name__} for module {module!r} after "
            f"{self.max_reasks + 1} attempts; last error: {last_error}"
        )


def _usage_dict(usage: Usage) -> dict[str, int]:
    """Usage as a plain dict."""
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}


def entry_usage(entry: dict[str, Any]) -> Usage:
    """The token usage a transcript entry records (none for a cached answer)."""
    usage = entry.get("usage") or {}
    return Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))


def _short_error(exc: Exception) -> str:
    """A compact one-line description of a parse or validation error."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in err.get("loc", ())) or "<root>"
            parts.append(f"{loc}: {err.get('msg', '')}")
        return "; ".join(parts)[:1000]
    return str(exc).replace("\n", " ")[:1000]
