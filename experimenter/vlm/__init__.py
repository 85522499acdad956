"""VLM backends: a common interface, the OpenAI client, and transcript replay (see DESIGN.md)."""

from gameon.experimenter.vlm.backend import (
    Backend,
    Transcript,
    Usage,
    VLMError,
    encode_png,
    redact,
    request_hash,
)
from gameon.experimenter.vlm.openai_backend import OpenAIBackend
from gameon.experimenter.vlm.replay import ReplayBackend

__all__ = [
    "Backend",
    "OpenAIBackend",
    "ReplayBackend",
    "Transcript",
    "Usage",
    "VLMError",
    "encode_png",
    "redact",
    "request_hash",
]
