"""Google Gemini backend through the official `google-genai` client (generateContent)."""

from __future__ import annotations

import json
import os

from google import genai
from google.genai import types

from gameon.experimenter.vlm.backend import (
    BASE_URL_SETTING,
    Backend,
    EmptyAnswer,
    Transcript,
    Usage,
    VLMRefused,
    check_base_url,
    read_key,
)

KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
BASE_URL_ENV = "GOOGLE_GEMINI_BASE_URL"
"""Where google-genai sends requests when no base URL is given; read here too, so that the run
knows (and checks) where its answers come from."""
RETRY_STATUS_CODES = [408, 429, 500, 502, 503, 504]


class GeminiBackend(Backend):
    """Gemini with JSON-schema-constrained answers and inline PNG image parts.

    Rate limits (429), server errors (5xx), connection errors and timeouts are retried by the
    client itself (`attempts` tries in all, exponential backoff from `initial_delay` seconds);
    whatever still fails becomes a VLMError in `Backend.generate`. A response without text (a
    safety block, a token limit) is billed: its tokens count and it is re-asked. The API key is
    read from GEMINI_API_KEY (else GOOGLE_API_KEY) once, here; it travels in the
    `x-goog-api-key` header, never in the URL, and is registered as a secret, so it is scrubbed
    from every error message and transcript entry. Whitespace around it (a pasted newline) is
    dropped, so the key scrubbed is the key sent.
    """

    def __init__(
        self,
        model: str = "gemini-2.5-flash",
        base_url: str | None = None,
        timeout: float = 30.0,
        attempts: int = 4,
        transcript: Transcript | None = None,
        max_reasks: int = 2,
        cache: bool = False,
        initial_delay: float = 1.0,
        max_delay: float = 30.0,
        temperature: float | None = None,
    ) -> None:
        """Build the client; a missing API key, or a base URL that is not http(s), is a
        ValueError."""
        super().__init__("gemini", model, transcript, max_reasks=max_reasks, cache=cache)
        source = BASE_URL_SETTING if base_url else BASE_URL_ENV
        base_url = base_url or os.environ.get(BASE_URL_ENV) or None
        if base_url is not None:
            check_base_url(base_url, source)
        keys = [read_key(env) for env in KEY_ENVS]
        key = next((secret for secret in keys if secret), "")
        if not key:
            raise ValueError(
                "no Gemini API key: set the environment variable GEMINI_API_KEY (or "
                "GOOGLE_API_KEY); to run offline use the rules backend (`--vlm-backend rules`; "
                'in a bench matrix, backend = "rules") or replay a recorded transcript instead'
            )
        for secret in keys:
            self.add_secret(secret)
        self.key_source = next(env for env, secret in zip(KEY_ENVS, keys, strict=True) if secret)
        self.base_url = base_url
        self.temperature = temperature
        http_options = types.HttpOptions(
            base_url=base_url,
            timeout=max(1, int(round(timeout * 1000))),  # milliseconds
            retry_options=types.HttpRetryOptions(
                attempts=max(1, attempts),
                initial_delay=initial_delay,
                max_delay=max_delay,
                jitter=initial_delay,
                http_status_codes=RETRY_STATUS_CODES,
            ),
        )
        self._client = genai.Client(api_key=key, vertexai=False, http_options=http_options)

    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        """One generateContent request with a JSON-schema response format."""
        contents: list = [types.Part.from_bytes(data=png, mime_type="image/png") for png in images]
        contents.append(prompt)
        config = types.GenerateContentConfig(
            response_mime_type="application/json",
            response_json_schema=schema,
            temperature=self.temperature,
        )
        try:
            response = self._client.models.generate_content(
                model=self.model, contents=contents, config=config
            )
        except json.JSONDecodeError:  # a web page or proxy, not the API
            raise VLMRefused(
                f"the server at {self.base_url or 'the Gemini API'} answered something that is "
                "not JSON, not a Gemini response: check --vlm-base-url (the API's root, without "
                "a version or model path)"
            ) from None
        usage = Usage()
        meta = response.usage_metadata
        if meta is not None:  # thinking tokens are billed as output: counted as completion
            usage = Usage.reported(
                meta.prompt_token_count,
                max(0, meta.candidates_token_count or 0) + max(0, meta.thoughts_token_count or 0),
            )
        text = response.text
        if text is None:
            raise EmptyAnswer(f"the answer has no text ({_why_no_text(response)})", usage)
        return text, usage


def _why_no_text(response: types.GenerateContentResponse) -> str:
    """The finish reason of a response without text, or why its prompt was blocked."""
    if response.candidates and response.candidates[0].finish_reason:
        return f"finish reason {_name(response.candidates[0].finish_reason)}"
    feedback = response.prompt_feedback
    if feedback is not None and feedback.block_reason:
        return f"prompt blocked: {_name(feedback.block_reason)}"
    return "no reason given"


def _name(value: object) -> str:
    """An enum member's name (SAFETY), else the value as text."""
    return str(getattr(value, "name", value))
