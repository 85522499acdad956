"""Replay a run's VLM answers from its transcript, without any network."""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

from gameon.experimenter.vlm.backend import Backend, Transcript, Usage, VLMError


class ReplayBackend(Backend):
    """Answers each request with the next recorded answer that has the same request hash."""

    def __init__(
        self,
        transcript_path: str | Path,
        transcript: Transcript | None = None,
        max_reasks: int = 2,
    ) -> None:
        """Load transcript_path (a transcript.jsonl, or the run dir holding one)."""
        path = Path(transcript_path)
        if path.is_dir():
            path = path / "transcript.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"no transcript at {path}")
        entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        first: dict[str, Any] = entries[0] if entries else {}
        super().__init__(
            "replay", str(first.get("model", "")), transcript, max_reasks=max_reasks, cache=False
        )
        self.source = path
        self._recorded_backend = str(first.get("backend", ""))
        self._queues: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        for entry in entries:
            self._queues[entry["request_hash"]].append(entry)
        self._lock = threading.Lock()

    def _hash_identity(self) -> tuple[str, str]:
        """Hash requests as the recorded backend did, so hashes match."""
        return self._recorded_backend, self.model

    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        """Unused: replay needs the request hash (see _complete_request)."""
        raise NotImplementedError("ReplayBackend answers through _complete_request")

    def _complete_request(
        self, prompt: str, images: list[bytes], schema: dict, req_hash: str, module: str
    ) -> tuple[str, Usage]:
        """Return the next recorded answer for this hash; a recorded failure fails again."""
        with self._lock:
            queue = self._queues.get(req_hash)
            if not queue:
                raise VLMError(
                    f"replay: no recorded answer for module {module!r}, request hash {req_hash} "
                    f"(transcript {self.source})"
                )
            entry = queue.popleft()
        if entry.get("raw_response") is None:
            raise VLMError(f"replay: recorded failure for module {module!r}: {entry.get('error')}")
        usage = entry.get("usage") or {}
        return str(entry["raw_response"]), Usage(
            int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        )
