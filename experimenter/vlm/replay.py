"""Replay a run's VLM answers from its transcript, without any network.

Each request is answered with the next unused recorded answer that has the same request hash
(backend, model, module, prompt, image hashes, schema). If none has, the next unused recorded
answer of the same module, in recorded order, is used instead and counted in
`order_matches`: rendered images (the scene camera, the curve plot) are deterministic on one
machine but may differ by a few pixels elsewhere, which changes their hashes while the
decisions they lead to stay the same. A module with no unused answer left is a VLMError.
Calls recorded without an answer (stopped unsent by the cost cap, cut off by Ctrl-C) are not
answers to give: the replayed run's own cap stops it where the run stopped.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

from gameon.experimenter.vlm.backend import (
    TRANSCRIPT_FILE,
    Backend,
    EmptyAnswer,
    Transcript,
    Usage,
    VLMError,
    VLMUnreachable,
    entry_usage,
    replayable_entries,
)

log = logging.getLogger(__name__)


def check_calls(entries: list[dict[str, Any]], path: Path) -> None:
    """Refuse (ValueError) a file that records no call, or lines that are not calls: a replay
    of it would answer nothing, so every call of the run would fall back, labelled a replay."""
    if not entries:
        raise ValueError(f"{path} records no VLM call to replay; give a run's transcript.jsonl")
    for number, entry in enumerate(entries, 1):
        if not (
            isinstance(entry.get("request_hash"), str) and isinstance(entry.get("module"), str)
        ):
            raise ValueError(
                f"{path} is not a VLM transcript: its call {number} has no request_hash and "
                "module; give a run's transcript.jsonl"
            )


class ReplayBackend(Backend):
    """Answers each request with the next recorded answer of its hash, else of its module."""

    def __init__(
        self,
        transcript_path: str | Path,
        transcript: Transcript | None = None,
        max_reasks: int = 2,
    ) -> None:
        """Load transcript_path (a transcript.jsonl, or the run dir holding one); a line torn
        by a kill mid-write is skipped, as `Transcript.entries()` does, and so are the calls of
        an iteration that a kill abandoned (the resumed run's answers are the ones it used) and
        the calls that got no answer (`replayable_entries`).
        A file with no call, or with lines that are not calls, is a ValueError (`check_calls`)."""
        path = Path(transcript_path)
        if path.is_dir():
            path = path / TRANSCRIPT_FILE
        if not path.exists():
            raise FileNotFoundError(f"no transcript at {path}")
        entries = replayable_entries(path)
        check_calls(entries, path)
        first: dict[str, Any] = entries[0]
        super().__init__(
            "replay", str(first.get("model", "")), transcript, max_reasks=max_reasks, cache=False
        )
        self.source = path
        self.recorded_backend = str(first.get("backend", ""))
        self._entries = entries
        self._used = [False] * len(entries)
        self._by_hash: dict[str, list[int]] = defaultdict(list)
        self._by_module: dict[str, list[int]] = defaultdict(list)
        for index, entry in enumerate(entries):
            self._by_hash[entry["request_hash"]].append(index)
            self._by_module[entry["module"]].append(index)
        self.order_matches = 0
        self._lock = threading.Lock()

    def _hash_identity(self) -> tuple[str, str]:
        """Hash requests as the recorded backend did, so hashes match."""
        return self.recorded_backend, self.model

    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        """Unused: replay needs the request hash (see _complete_request)."""
        raise NotImplementedError("ReplayBackend answers through _complete_request")

    def _next(self, indices: list[int]) -> int | None:
        return next((i for i in indices if not self._used[i]), None)

    def _complete_request(
        self, prompt: str, images: list[bytes], schema: dict, req_hash: str, module: str
    ) -> tuple[str, Usage]:
        """Return the next recorded answer for this hash (else module); failures fail again,
        and an answer served without text is that again, with its recorded reason."""
        with self._lock:
            index = self._next(self._by_hash.get(req_hash, []))
            if index is None:
                index = self._next(self._by_module.get(module, []))
                if index is None:
                    raise VLMError(
                        f"replay: no recorded answer for module {module!r}, request hash "
                        f"{req_hash} (transcript {self.source})"
                    )
                self.order_matches += 1
                log.warning("replay: module %r answered in recorded order (hash differs)", module)
            self._used[index] = True
            entry = self._entries[index]
        if entry.get("raw_response") is None:
            raise VLMUnreachable(
                f"replay: recorded failure for module {module!r}: {entry.get('error')}"
            )
        if entry["raw_response"] == "" and entry.get("error"):
            raise EmptyAnswer(str(entry["error"]), entry_usage(entry))
        raw = str(entry["raw_response"])
        # An over-long answer was kept cut: padded back to its length it is refused again, not
        # read as the (perhaps valid) text that was kept.
        return raw.ljust(int(entry.get("answer_chars", 0))), entry_usage(entry)
