"""VLM backends: a common interface, OpenAI and Gemini clients, transcript replay (DESIGN.md)."""

from gameon.experimenter.vlm.backend import (
    Backend,
    Transcript,
    Usage,
    VLMError,
    encode_png,
    redact,
    request_hash,
)
from gameon.experimenter.vlm.gemini_backend import GeminiBackend
from gameon.experimenter.vlm.openai_backend import OpenAIBackend
from gameon.experimenter.vlm.replay import ReplayBackend

__all__ = [
    "Backend",
    "GeminiBackend",
    "OpenAIBackend",
    "ReplayBackend",
    "Transcript",
    "Usage",
    "VLMError",
    "encode_png",
    "redact",
    "request_hash",
]
