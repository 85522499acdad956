"""OpenAI chat-completions backend (also any OpenAI-compatible server: Ollama, vLLM)."""

from __future__ import annotations

import base64
import os
import re
from urllib.parse import urlparse

import openai
from openai.types.chat import ChatCompletion

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

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def is_local_url(url: str) -> bool:
    """Whether a base URL points at this machine (no API key needed)."""
    return (urlparse(url).hostname or "") in LOCAL_HOSTS


class OpenAIBackend(Backend):
    """The official openai client with JSON-schema answers and base64 PNG image parts.

    Rate limits (429), server errors (5xx), connection errors and timeouts are retried by the
    client itself (`max_retries`, exponential backoff honouring `retry-after`); whatever still
    fails becomes a VLMError. A response without text (a refusal, a token limit) is billed: its
    tokens count and it is re-asked. The API key is read from `api_key_env` once, here, and
    lives only inside the client; it is registered as a secret, so it is scrubbed from every
    error message and transcript entry. Whitespace around it (a pasted newline) is dropped: in
    a header it fails every request.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 30.0,
        max_retries: int = 3,
        transcript: Transcript | None = None,
        max_reasks: int = 2,
        cache: bool = False,
        temperature: float | None = None,
    ) -> None:
        """Build the client; a base URL that is not http(s), or a missing key for a non-local
        server, is a ValueError."""
        super().__init__("openai", model, transcript, max_reasks=max_reasks, cache=cache)
        resolved_url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        check_base_url(resolved_url, BASE_URL_SETTING if base_url else "OPENAI_BASE_URL")
        key = read_key(api_key_env)
        if not key:
            if not is_local_url(resolved_url):
                raise ValueError(
                    f"no API key for {resolved_url}: set the environment variable {api_key_env} "
                    "(a server that checks no key, e.g. vLLM on another machine, takes any "
                    f"value: {api_key_env}=sk-no-key)"
                )
            key = "local-no-key"
        else:
            self.add_secret(key)
        self.key_source = api_key_env
        self.base_url = resolved_url
        self.temperature = temperature
        self._client = openai.OpenAI(
            api_key=key, base_url=resolved_url, timeout=timeout, max_retries=max_retries
        )

    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        """One chat-completions request with a JSON-schema response format."""
        content: list[dict] = [{"type": "text", "text": prompt}]
        for png in images:
            data = base64.b64encode(png).decode("ascii")
            content.append(
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}
            )
        name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("title", "answer")))[:64] or "answer"
        kwargs: dict = {}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        response = self._client.chat.completions.create(
            model=self.model,
            messages=[{"role": "user", "content": content}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": False},
            },
            **kwargs,
        )
        # openai returns the text of a non-JSON body, and a JSON one as it is, `choices` or not
        if not isinstance(response, ChatCompletion) or "choices" not in response.model_fields_set:
            if error := _server_error(response):
                raise VLMRefused(
                    f"the server at {self.base_url} answered an error instead of a chat "
                    f"completion: {error}"
                )
            raise VLMRefused(
                f"the server at {self.base_url} answered {_described(response)}, not a chat "
                "completion: check --vlm-base-url (an OpenAI-compatible server's usually ends in "
                "/v1, e.g. http://localhost:11434/v1 for Ollama)"
            )
        usage = Usage()
        if response.usage is not None:
            usage = Usage.reported(response.usage.prompt_tokens, response.usage.completion_tokens)
        if not response.choices:
            raise EmptyAnswer("the response has no choices", usage)
        choice = response.choices[0]
        text = _message_text(choice.message.content)
        if not text:
            refusal = getattr(choice.message, "refusal", None)
            why = f"refused: {refusal}" if refusal else f"finish reason {choice.finish_reason}"
            raise EmptyAnswer(f"the answer has no text ({why})", usage)
        return text, usage


def _described(response: object) -> str:
    """A few words on what came back instead of a chat completion (no more of it: it is the
    server's, and may be a whole web page)."""
    if isinstance(response, str):
        words = " ".join(response.split()[:6])
        return f"{len(response)} characters of text beginning {words[:60]!r}"
    if isinstance(response, ChatCompletion):
        return "JSON without `choices`"
    return f"a {type(response).__name__}"


def _server_error(response: object) -> str:
    """The message of an `{"error": ...}` body a server sent with status 200 (some servers report
    a request they cannot serve so), cut to 300 characters; "" for any other answer."""
    extra = getattr(response, "model_extra", None) or {}
    error = extra.get("error")
    if isinstance(error, dict):
        error = error.get("message") or error
    return "" if error is None else repr(str(error)[:300])


def _message_text(content: object) -> str:
    """A message's answer text: its content, or the text parts of content given as a list of
    parts (some OpenAI-compatible servers answer so, e.g. a reasoning model's thinking part
    beside its text part), so that such an answer is read rather than stopping the run."""
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return "" if content is None else str(content)
