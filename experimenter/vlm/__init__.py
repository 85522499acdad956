"""The VLM experimenter: backends, prompts and modules.

Backends: `make_backend(name)` builds rules | gemini | openai | replay. The Gemini and OpenAI
backends are imported on first use, so the rules and replay backends work without their SDKs.
"""

from typing import Any

from gameon.experimenter.vlm.backend import (
    Backend,
    Transcript,
    Usage,
    VLMError,
    VLMRefused,
    VLMUnreachable,
    encode_png,
    redact,
    request_hash,
)
from gameon.experimenter.vlm.factory import BACKENDS, cost_usd, make_backend
from gameon.experimenter.vlm.replay import ReplayBackend
from gameon.experimenter.vlm.rules_backend import RulesBackend

_LAZY = {
    "GeminiBackend": "gameon.experimenter.vlm.gemini_backend",
    "OpenAIBackend": "gameon.experimenter.vlm.openai_backend",
}


def __getattr__(name: str) -> Any:
    """Import the SDK-backed backends only when they are asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "Backend",
    "GeminiBackend",
    "OpenAIBackend",
    "ReplayBackend",
    "RulesBackend",
    "Transcript",
    "Usage",
    "VLMError",
    "VLMRefused",
    "VLMUnreachable",
    "cost_usd",
    "encode_png",
    "make_backend",
    "redact",
    "request_hash",
]
