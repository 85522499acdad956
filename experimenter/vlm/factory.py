"""Build a VLM backend by name, and price its token usage (estimates from prices.toml)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from gameon.experimenter.vlm.backend import TRANSCRIPT_FILE, Backend, Transcript, Usage

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

BACKENDS = ("rules", "gemini", "openai", "replay")
DEFAULT_MODELS = {"gemini": "gemini-2.5-flash", "openai": "gpt-4o-mini"}
PRICES_TOML = Path(__file__).with_name("prices.toml")
FREE_BACKENDS = ("rules", "replay")


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
    timeout: float = 30.0,
    retries: int = 3,
    max_reasks: int = 2,
    api_key_env: str = "OPENAI_API_KEY",
) -> Backend:
    """A backend by name: rules | gemini | openai | replay (ValueError says what is missing).

    gemini reads its key from GEMINI_API_KEY or GOOGLE_API_KEY; openai from `api_key_env`
    (not needed for a server on this machine, e.g. Ollama at http://localhost:11434/v1);
    replay needs `replay_path`, a transcript.jsonl or the run folder holding one. Keys are
    never written anywhere: the transcript scrubs them.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown VLM backend {name!r}; accepted: {', '.join(BACKENDS)}")
    if name != "replay" and replay_path is not None:
        raise ValueError(f"a replay path is only read by the replay backend, not {name!r}")
    if name in ("rules", "replay") and (model is not None or base_url is not None):
        raise ValueError(f"the {name} backend takes no model or base_url")
    if name == "rules":
        from gameon.experimenter.vlm.rules_backend import RulesBackend

        return RulesBackend(transcript, max_reasks=max_reasks)
    if name == "replay":
        if replay_path is None:
            raise ValueError("the replay backend needs a transcript: give --vlm-replay PATH")
        from gameon.experimenter.vlm.replay import ReplayBackend

        path = Path(replay_path)
        if not (path / TRANSCRIPT_FILE if path.is_dir() else path).is_file():
            raise ValueError(f"no transcript to replay at {path}")
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
