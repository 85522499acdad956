"""Build a VLM backend by name, and price its token usage (estimates from prices.toml)."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

from gameon.experimenter.vlm.backend import TRANSCRIPT_FILE, Backend, Transcript, Usage
from gameon.records import VLMUsage
from gameon.text import plural

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

BACKENDS = ("rules", "gemini", "openai", "replay")
DEFAULT_MODELS = {"gemini": "gemini-2.5-flash", "openai": "gpt-4o-mini"}
PRICES_TOML = Path(__file__).with_name("prices.toml")
FREE_BACKENDS = ("rules", "replay")
DEFAULT_TIMEOUT_S = 30.0
"""Seconds the client waits on a model server with nothing arriving (to connect, or between parts
of its answer) before it gives up on the request and retries: a bound on each wait, not on the
whole request, which a server sending its answer slowly may stretch past it."""
DEFAULT_RETRIES = 3
"""Times the client retries a request that failed in transport (timeouts, 429, 5xx)."""


def check_transport(backend: str, timeout: float | None, retries: int | None) -> None:
    """Refuse a request timeout that is not a positive, finite number of seconds (Gemini's
    client takes whole milliseconds, which infinity has not), negative retries, or either for a
    backend that sends no requests (None: the defaults)."""
    number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
    if timeout is not None and (not number or not 0 < timeout < math.inf):
        raise ValueError(
            f"vlm_timeout (--vlm-timeout) must be a number of seconds > 0 and finite, or None, "
            f"got {timeout!r}"
        )
    if retries is not None and (
        not isinstance(retries, int) or isinstance(retries, bool) or retries < 0
    ):
        raise ValueError(
            f"vlm_retries (--vlm-retries) must be an integer >= 0 or None, got {retries!r}"
        )
    if backend in FREE_BACKENDS and (timeout is not None or retries is not None):
        raise ValueError(
            f"the {backend} backend sends no requests: vlm_timeout (--vlm-timeout) and "
            "vlm_retries (--vlm-retries) are for gemini and openai"
        )


def vlm_label(backend: str, model: str | None = None) -> str:
    """How the VLM curriculum's results are labelled: "vlm[rules]" and "vlm[replay]", else the
    backend and its model (the default one if None), e.g. "vlm[gemini:gemini-2.5-flash]"."""
    if backend in FREE_BACKENDS:
        return f"vlm[{backend}]"
    return f"vlm[{backend}:{model or DEFAULT_MODELS[backend]}]"


def make_backend(
    name: str,
    model: str | None = None,
    base_url: str | None = None,
    transcript: Transcript | None = None,
    replay_path: str | Path | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    max_reasks: int = 2,
    api_key_env: str = "OPENAI_API_KEY",
) -> Backend:
    """A backend by name: rules | gemini | openai | replay (ValueError says what is missing).

    gemini reads its key from GEMINI_API_KEY or GOOGLE_API_KEY; openai from `api_key_env`
    (not needed for a server on this machine, e.g. Ollama at http://localhost:11434/v1);
    replay needs `replay_path`, a transcript.jsonl or the run folder holding one. `timeout`
    (seconds per request) and `retries` apply to gemini and openai (None: DEFAULT_TIMEOUT_S,
    DEFAULT_RETRIES; a slow local server may need a longer timeout). Keys are never written
    anywhere: the transcript scrubs them.
    """
    if name not in BACKENDS:
        raise ValueError(
            f"unknown VLM backend {name!r} (--vlm-backend); accepted: {', '.join(BACKENDS)}"
        )
    check_transport(name, timeout, retries)
    if name != "replay" and replay_path is not None:
        raise ValueError(
            "a replay path (replay_path, --vlm-replay) is only read by the replay backend, "
            f"not {name!r}"
        )
    if name in FREE_BACKENDS and (model is not None or base_url is not None):
        raise ValueError(
            f"the {name} backend takes no model (--vlm-model) or base_url (--vlm-base-url)"
        )
    timeout = DEFAULT_TIMEOUT_S if timeout is None else float(timeout)
    retries = DEFAULT_RETRIES if retries is None else retries
    if name == "rules":
        from gameon.experimenter.vlm.rules_backend import RulesBackend

        return RulesBackend(transcript, max_reasks=max_reasks)
    if name == "replay":
        if replay_path is None:
            raise ValueError(
                "the replay backend needs a transcript: give replay_path (--vlm-replay PATH)"
            )
        from gameon.experimenter.vlm.replay import ReplayBackend

        path = Path(replay_path)
        if not (path / TRANSCRIPT_FILE if path.is_dir() else path).is_file():
            raise ValueError(f"no transcript to replay at {path} (replay_path, --vlm-replay)")
        return ReplayBackend(path, transcript, max_reasks=max_reasks)
    if name == "gemini":
        from gameon.experimenter.vlm.gemini_backend import GeminiBackend

        return GeminiBackend(
            model or DEFAULT_MODELS["gemini"],
            base_url=base_url,
            timeout=timeout,
            attempts=retries + 1,
            transcript=transcript,
            max_reasks=max_reasks,
        )
    from gameon.experimenter.vlm.openai_backend import OpenAIBackend

    return OpenAIBackend(
        model or DEFAULT_MODELS["openai"],
        base_url=base_url,
        api_key_env=api_key_env,
        timeout=timeout,
        max_retries=retries,
        transcript=transcript,
        max_reasks=max_reasks,
    )


@cache
def prices() -> dict[str, dict[str, float]]:
    """USD per million prompt and completion tokens per model (estimates, see prices.toml)."""
    with open(PRICES_TOML, "rb") as file:
        return {model: dict(p) for model, p in tomllib.load(file)["models"].items()}


def cost_usd(backend: str, model: str | None, usage: Usage) -> float:
    """Estimated cost of the usage; 0 for rules, replay and models without a listed price."""
    if backend in FREE_BACKENDS or model is None:
        return 0.0
    price = prices().get(model)
    if price is None:
        return 0.0
    total = usage.prompt_tokens * price["prompt"] + usage.completion_tokens * price["completion"]
    return round(total / 1e6, 6)


def usd(amount: float) -> str:
    """Dollars for people: cents, or more decimals below a cent (a small run never reads $0.00)."""
    if amount >= 0.01 or amount == 0:
        return f"${amount:.2f}"
    return f"${amount:.4f}" if amount >= 0.0001 else f"${amount:.6f}"


def vlm_line(vlm: VLMUsage, transcript: Path) -> str:
    """What a vlm run asked of its model, as the run's last line says it: calls answered, answers
    used, fallbacks (and the transcript that says why), tokens and cost."""
    fallbacks = f"{plural(vlm.fallbacks, 'fallback')} to learning progress"
    if vlm.capped_calls:
        fallbacks += f" ({vlm.capped_calls} at the cost cap)"
    if vlm.fallbacks:
        fallbacks += f", why in {transcript}"
    tokens = f"{vlm.prompt_tokens} + {vlm.completion_tokens} tokens"
    calls = f"{plural(vlm.calls, 'call')} answered"
    if vlm.used_answers is not None:
        calls += f", {plural(vlm.used_answers, 'answer')} used"
    return f"vlm:      {calls}, {fallbacks}; {tokens}, {usd(vlm.cost_usd)}"
