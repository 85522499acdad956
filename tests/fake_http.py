"""A scripted JSON HTTP server on 127.0.0.1 for the VLM backends' wire-format tests."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Scripted:
    """One scripted server reply."""

    status: int = 200
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    content_type: str = "application/json"


class ScriptedServer:
    """Answers POSTs to paths matching `path` with queued replies, recording every request."""

    def __init__(self, path: str | re.Pattern[str]) -> None:
        """Start serving on a free port."""
        self.path = re.compile(path) if isinstance(path, str) else path
        self.replies: queue.Queue[Scripted] = queue.Queue()
        self.paths: list[str] = []
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length", 0))
                payload = self.rfile.read(length)
                server.paths.append(self.path)
                server.requests.append(json.loads(payload or b"{}"))
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                if not server.path.fullmatch(self.path):
                    reply = Scripted(404, json.dumps({"error": {"code": 404, "message": "nf"}}))
                else:
                    try:
                        reply = server.replies.get_nowait()
                    except queue.Empty:
                        body = {"error": {"code": 400, "message": "unscripted"}}
                        reply = Scripted(400, json.dumps(body))
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                data = reply.body.encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.send_header("content-length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout tests)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT"""
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: Scripted) -> None:
        """Queue replies in order."""
        for reply in replies:
            self.replies.put(reply)

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def openai_reply(content: str) -> Scripted:
    """A chat completion answering `content`: 100 prompt and 20 completion tokens."""
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }
    return Scripted(200, json.dumps(body))


def gemini_reply(content: str, thinking_tokens: int = 0) -> Scripted:
    """A generateContent answer: 100 prompt and 20 candidate tokens, and thinking tokens if any."""
    usage = {"promptTokenCount": 100, "candidatesTokenCount": 20}
    if thinking_tokens:
        usage["thoughtsTokenCount"] = thinking_tokens
    body = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": content}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": usage,
    }
    return Scripted(200, json.dumps(body))
