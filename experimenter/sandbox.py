"""Run a coded skill (Python source from a language model) in an isolated child process.

The parent checks the source against an allow-list (`check_source`), then starts
`python -I -m gameon.experimenter.sandbox` under a namespace tool (`namespace_command`: bwrap,
else unshare) with a minimal environment. The child sets resource limits before it runs any of
the source, execs it with RestrictedPython's guards and the API of `coded_api`, and trades
newline-delimited JSON with the parent: a scene in, an action out, one per env step. Every
failure ends the child and raises `SkillRejected` with a one-line reason.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import json
import logging
import math
import operator
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from RestrictedPython import compile_restricted_exec
from RestrictedPython.Eval import default_guarded_getitem, default_guarded_getiter
from RestrictedPython.Guards import (
    full_write_guard,
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    safer_getattr,
)

from gameon.experimenter import coded_api

logger = logging.getLogger("gameon.sandbox")

SANDBOX_ENV = "GAMEON_SANDBOX"
"""Environment variable choosing the namespace tool: "auto" (default: bwrap, else unshare),
"bwrap" or "unshare"."""
CHILD_MODULE = "gameon.experimenter.sandbox"
MAX_INIT_BYTES = 1 << 20
MAX_STDERR_BYTES = 4096
MAX_REASON_CHARS = 300
INSTALL_HINT = "apt-get install bubblewrap"
TOO_DEEP = "the source is nested too deeply"

FORBIDDEN_NAMES = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "getattr",
        "setattr",
        "delattr",
        "hasattr",
        "globals",
        "locals",
        "vars",
        "dir",
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "type",
        "object",
        "super",
        "memoryview",
        "bytearray",
        "classmethod",
        "staticmethod",
        "property",
        "id",
        "printed",
    }
)
FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "format",
        "format_map",
        "mro",
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "ag_frame",
        "ag_code",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "tb_frame",
        "tb_next",
        "co_code",
    }
)
ALLOWED_NODES: tuple[type[ast.AST], ...] = (
    ast.Module,
    ast.FunctionDef,
    ast.arguments,
    ast.arg,
    ast.Return,
    ast.Assign,
    ast.AugAssign,
    ast.For,
    ast.While,
    ast.If,
    ast.Break,
    ast.Continue,
    ast.Pass,
    ast.Expr,
    ast.Try,
    ast.ExceptHandler,
    ast.Raise,
    ast.Assert,
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.Call,
    ast.keyword,
    ast.IfExp,
    ast.Constant,
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Set,
    ast.ListComp,
    ast.DictComp,
    ast.SetComp,
    ast.GeneratorExp,
    ast.comprehension,
    ast.Starred,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.Lambda,
    ast.expr_context,
    ast.operator,
    ast.boolop,
    ast.cmpop,
    ast.unaryop,
)
CHILD_BUILTINS = (
    "None",
    "False",
    "True",
    "abs",
    "all",
    "any",
    "bool",
    "dict",
    "divmod",
    "enumerate",
    "float",
    "int",
    "isinstance",
    "len",
    "list",
    "max",
    "min",
    "pow",
    "range",
    "repr",
    "reversed",
    "set",
    "round",
    "sorted",
    "str",
    "sum",
    "tuple",
    "zip",
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "Exception",
    "IndexError",
    "KeyError",
    "LookupError",
    "MemoryError",
    "NameError",
    "NotImplementedError",
    "OverflowError",
    "RecursionError",
    "RuntimeError",
    "StopIteration",
    "TypeError",
    "ValueError",
    "ZeroDivisionError",
)
"""Builtins the skill's code may use, all from Python's builtins."""
_NODE_NAMES = {
    ast.Import: "import statements",
    ast.ImportFrom: "import statements",
    ast.Global: "global statements",
    ast.Nonlocal: "nonlocal statements",
    ast.ClassDef: "class definitions",
    ast.AsyncFunctionDef: "async functions",
    ast.Await: "await",
    ast.AsyncFor: "async for",
    ast.AsyncWith: "async with",
    ast.With: "with statements",
    ast.Yield: "yield (generators)",
    ast.YieldFrom: "yield (generators)",
    ast.NamedExpr: "the walrus operator :=",
    ast.Delete: "del statements",
}


class SkillRejected(Exception):
    """A coded skill was refused or stopped; `reason` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SandboxLimits:
    """What one coded skill may use: CPU, memory, time, size and number of actions."""

    cpu_seconds: float = 5.0
    memory_mb: int = 256
    wall_seconds: float = 60.0
    step_wall_seconds: float = 5.0
    max_source_chars: int = 6000
    max_steps: int = 1000
    max_message_bytes: int = 64 * 1024
    max_print_chars: int = 4096


def _line(node: ast.AST) -> str:
    return f" (line {node.lineno})" if hasattr(node, "lineno") else ""


def _check_node(node: ast.AST) -> None:
    if type(node) in _NODE_NAMES:
        raise SkillRejected(f"{_NODE_NAMES[type(node)]} are not allowed{_line(node)}")
    if not isinstance(node, ALLOWED_NODES):
        raise SkillRejected(f"{type(node).__name__} syntax is not allowed{_line(node)}")
    names: list[str] = []
    if isinstance(node, ast.Name):
        names.append(node.id)
        if node.id in FORBIDDEN_NAMES:
            raise SkillRejected(f"the name {node.id!r} is not allowed{_line(node)}")
    elif isinstance(node, ast.Attribute):
        names.append(node.attr)
        if node.attr in FORBIDDEN_ATTRIBUTES:
            raise SkillRejected(f"the attribute {node.attr!r} is not allowed{_line(node)}")
    elif isinstance(node, ast.FunctionDef):
        names.append(node.name)
        if node.decorator_list:
            raise SkillRejected(f"decorators are not allowed{_line(node)}")
    elif isinstance(node, (ast.arg, ast.keyword, ast.ExceptHandler)):
        names.append(getattr(node, "arg", None) or getattr(node, "name", None) or "")
    for name in names:
        if name.startswith("_"):
            raise SkillRejected(f"names starting with '_' are not allowed: {name!r}{_line(node)}")


def check_source(source: str, limits: SandboxLimits = SandboxLimits()) -> None:
    """Refuse source that is too long, unsafe by the allow-list, or defines no skill(blocks)."""
    if not isinstance(source, str):
        raise SkillRejected(f"the source must be a str, got {type(source).__name__}")
    if len(source) > limits.max_source_chars:
        raise SkillRejected(
            f"the source has {len(source)} characters, more than the limit "
            f"{limits.max_source_chars}"
        )
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise SkillRejected(f"syntax error (line {error.lineno}): {error.msg}") from None
    except ValueError as error:
        raise SkillRejected(f"the source does not parse: {error}") from None
    except (RecursionError, MemoryError):
        raise SkillRejected(TOO_DEEP) from None
    for node in ast.walk(tree):
        _check_node(node)
    try:
        result = compile_restricted_exec(source, "<skill>")
    except (RecursionError, MemoryError):
        raise SkillRejected(TOO_DEEP) from None
    if result.errors:
        raise SkillRejected(f"RestrictedPython refused the source: {result.errors[0]}")
    skills = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "skill"]
    if not skills:
        raise SkillRejected("the source must define a top-level function `def skill(blocks):`")
    arguments = skills[-1].args
    positional = [*arguments.posonlyargs, *arguments.args]
    required = len(positional) - len(arguments.defaults)
    keyword_only = any(default is None for default in arguments.kw_defaults)
    if not (positional or arguments.vararg) or required > 1 or keyword_only:
        raise SkillRejected(
            "skill() must take one argument, the list of block colours (any other argument "
            "needs a default)"
        )


def _tool_command(tool: str) -> list[str] | None:
    if tool == "bwrap":
        path = shutil.which("bwrap")
        if path is None:
            return None
        return [
            path,
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            *_tmp_binds(),
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-uts",
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--new-session",
            "--",
        ]
    if tool == "unshare":
        path = shutil.which("unshare")
        if path is None:
            return None
        command = [path, "--map-root-user", "--net", "--ipc", "--pid", "--fork", "--kill-child"]
        shell = shutil.which("sh") or "/bin/sh"
        return [*command, "--mount-proc", "--", shell, "-c", '"$@"; exit $?', "sh"]
    raise ValueError(f"unknown sandbox tool {tool!r}; accepted: auto, bwrap, unshare")


def _tmp_binds() -> list[str]:
    """Read-only binds, over the private /tmp, of what the child's Python needs that lives under
    /tmp (a checkout or virtual environment there); empty in the usual case."""
    import gameon

    needed = {Path(sys.prefix).resolve(), Path(gameon.__file__).resolve().parents[1]}
    binds = []
    for path in sorted(needed):
        if path.is_relative_to("/tmp") and path != Path("/tmp"):
            binds += ["--ro-bind", str(path), str(path)]
    return binds


@functools.lru_cache(maxsize=8)
def _trial_failure(command: tuple[str, ...]) -> str:
    """Why `true` fails under the command prefix, or "" when it runs (cached per prefix)."""
    true = shutil.which("true") or "/bin/true"
    try:
        done = subprocess.run([*command, true], capture_output=True, timeout=10, env=child_env())
    except (OSError, subprocess.TimeoutExpired) as error:
        return _truncate(str(error), 120)
    if done.returncode == 0:
        return ""
    lines = done.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
    return _truncate(f"exit code {done.returncode}: {lines[0]}", 120)


def namespace_command(tool: str | None = None) -> list[str]:
    """The command prefix that isolates the child: bwrap (read-only filesystem, private /tmp and
    /proc, no network, no capabilities), else unshare (user, network and pid namespaces, private
    /proc); checked once to work by running `true` under it. RuntimeError if none works, or if
    the environment variable GAMEON_SANDBOX names another tool."""
    if tool is None:
        tool = os.environ.get(SANDBOX_ENV) or "auto"
        if tool not in ("auto", "bwrap", "unshare"):
            raise RuntimeError(
                f"{SANDBOX_ENV}={tool!r} names no sandbox tool; accepted: auto, bwrap, unshare"
            )
    tools = ("bwrap", "unshare") if tool == "auto" else (tool,)
    problems = []
    for name in tools:
        command = _tool_command(name)
        if command is None:
            problems.append(f"{name} is not installed")
        elif not (failure := _trial_failure(tuple(command))):
            return command
        else:
            problems.append(f"{name} is installed but fails ({failure})")
    raise RuntimeError(
        f"no sandbox for coded skills: {'; '.join(problems)}; install bubblewrap "
        f"({INSTALL_HINT}) or util-linux's unshare"
    )


def child_env() -> dict[str, str]:
    """The child's whole environment: no inherited variables, so no API keys or tokens."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent"}


def child_command() -> list[str]:
    """The child's command line after the namespace prefix (isolated mode, no site of the user)."""
    return [sys.executable, "-I", "-m", CHILD_MODULE]


def _truncate(text: str, limit: int = MAX_REASON_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _encodable(text: str) -> str:
    """The text with lone surrogates (a skill's `raise E('\\ud83d')`) spelt as escapes: they
    cannot be encoded, and the reason goes on into prompts, logs and the transcript."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _valid_action(action: Any) -> str | None:
    if not isinstance(action, list):
        return f"an action must be a list of 5 numbers, got a {type(action).__name__}"
    if len(action) != 5:
        return f"an action must be a list of 5 numbers, got {len(action)} entries"
    for value in action:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"an action holds {_truncate(repr(value), 60)}, not a number"
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number) or not -1.0 <= number <= 1.0:
            return f"an action entry {_truncate(repr(value), 60)} is not a finite number in [-1, 1]"
    return None


class SandboxedSkill:
    """A coded skill running in a sandboxed child: `act(scene)` gives its next action."""

    def __init__(
        self,
        source: str,
        blocks: Sequence[str],
        limits: SandboxLimits = SandboxLimits(),
        relation: str | None = None,
    ) -> None:
        self.source = source
        self.blocks = list(blocks)
        self.limits = limits
        self.relation = relation
        self.steps = 0
        self.printed = ""
        self.done = False
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = bytearray()
        self._stderr = bytearray()
        self._started = 0.0
        self.rejection: SkillRejected | None = None

    def __enter__(self) -> SandboxedSkill:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Check the source, start the child and wait until it has loaded the skill."""
        if self.rejection is not None:
            raise self.rejection
        if self._process is not None:
            return
        try:
            check_source(self.source, self.limits)
            prefix = namespace_command()
        except SkillRejected as error:
            raise self._reject(error.reason) from None
        except RuntimeError as error:
            raise self._reject(str(error)) from None
        self._started = time.monotonic()
        try:
            self._process = subprocess.Popen(
                [*prefix, *child_command()],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=child_env(),
                cwd="/",
                start_new_session=True,
            )
        except OSError as error:
            raise self._reject(f"the sandbox could not start: {error}") from None
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        init = {
            "source": self.source,
            "blocks": self.blocks,
            "relation": self.relation,
            "limits": asdict(self.limits),
        }
        self._send(init)
        reply = self._receive()
        if "error" in reply:
            raise self._reject(f"the skill failed to load: {reply['error']}")
        if "rejected" in reply:
            raise self._reject(str(reply["rejected"]))
        if reply.get("ready") is not True:
            raise self._reject(f"the child sent {_truncate(repr(reply), 80)} instead of ready")

    def act(self, scene: Mapping[str, Any]) -> list[float] | None:
        """Send the current scene; the next 5-d action, or None once skill() has returned."""
        if self.done:
            return None
        self.start()
        self._send({"scene": scene})
        reply = self._receive()
        if "action" in reply:
            problem = _valid_action(reply["action"])
            if problem is not None:
                raise self._reject(f"invalid action: {problem}")
            if self.steps >= self.limits.max_steps:
                raise self._reject(f"the skill took more than {self.limits.max_steps} actions")
            self.steps += 1
            return [float(v) for v in reply["action"]]
        if reply.get("done") is True:
            self.done = True
            self.printed = _encodable(str(reply.get("printed", "")))[: self.limits.max_print_chars]
            self.close()
            return None
        if "error" in reply:
            raise self._reject(f"the skill raised {reply['error']}")
        if "rejected" in reply:
            raise self._reject(str(reply["rejected"]))
        raise self._reject(f"the child sent an unknown message {_truncate(repr(reply), 80)}")

    def close(self) -> None:
        """End the child (killing it if it still runs)."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                process.kill()
            process.wait(timeout=5)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    # -- the channel --------------------------------------------------------------------------

    def _send(self, message: Mapping[str, Any]) -> None:
        data = json.dumps(message, allow_nan=False, separators=(",", ":")).encode() + b"\n"
        limit = max(self.limits.max_message_bytes, MAX_INIT_BYTES if "source" in message else 0)
        if len(data) > limit:
            raise ValueError(f"a message to the skill has {len(data)} bytes, over {limit}")
        assert self._process is not None and self._process.stdin is not None
        try:
            self._process.stdin.write(data)
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._reject(self._death_reason()) from None

    def _receive(self) -> dict[str, Any]:
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        limits = self.limits
        step_deadline = time.monotonic() + limits.step_wall_seconds
        skill_deadline = self._started + limits.wall_seconds
        while b"\n" not in self._buffer:
            if len(self._buffer) > limits.max_message_bytes:
                raise self._reject(
                    f"the skill sent a message over the limit of {limits.max_message_bytes} bytes"
                )
            now = time.monotonic()
            if now >= skill_deadline:
                raise self._reject(
                    f"the skill ran past its wall-clock limit of {limits.wall_seconds:g} s"
                )
            if now >= step_deadline:
                raise self._reject(
                    f"the skill took more than {limits.step_wall_seconds:g} s to produce an action"
                )
            ready, _, _ = select.select([fd], [], [], min(step_deadline, skill_deadline) - now)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise self._reject(self._death_reason())
            self._buffer += chunk
        line, _, rest = self._buffer.partition(b"\n")
        self._buffer = bytearray(rest)
        if len(line) > limits.max_message_bytes:
            raise self._reject(
                f"the skill sent a message over the limit of {limits.max_message_bytes} bytes"
            )
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            raise self._reject(
                f"the skill sent a message that is not JSON: {_truncate(repr(line[:80]), 100)}"
            ) from None
        if not isinstance(message, dict):
            raise self._reject(f"the skill sent {type(message).__name__}, not a JSON object")
        return message

    def _drain_stderr(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        stderr = self._process.stderr
        with stderr:
            for chunk in iter(lambda: stderr.read1(4096), b""):
                if len(self._stderr) < MAX_STDERR_BYTES:
                    self._stderr += chunk[: MAX_STDERR_BYTES - len(self._stderr)]

    def _death_reason(self) -> str:
        assert self._process is not None
        try:
            code = self._process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "the skill process stopped answering"
        signals = {-signal.SIGKILL, -signal.SIGXCPU, 128 + signal.SIGKILL, 128 + signal.SIGXCPU}
        if code in signals:
            return f"the skill exceeded its CPU limit of {self.limits.cpu_seconds:g} s"
        stderr = self._stderr.decode(errors="replace").strip()
        tail = f": {_truncate(stderr[-MAX_REASON_CHARS:])}" if stderr else ""
        return f"the skill process exited with code {code}{tail}"

    def _reject(self, reason: str) -> SkillRejected:
        self.close()
        reason = _truncate(_encodable(reason), 2 * MAX_REASON_CHARS)
        logger.warning("coded skill rejected: %s", reason)
        self.rejection = SkillRejected(reason)
        return self.rejection


# -- the child ----------------------------------------------------------------------------------


class PrintLimitExceeded(Exception):
    """Raised in the child when a skill prints more than its bound."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the skill printed more than {limit} characters")


class _Printer:
    """RestrictedPython's `_print_`: collects printed text up to a shared bound."""

    def __init__(self, store: list[str], limit: int, overflow: list[bool]) -> None:
        self.store, self.limit, self.overflow = store, limit, overflow

    def __call__(self, getattr_: Any = None) -> _Printer:
        return self

    def write(self, text: str) -> None:
        used = sum(map(len, self.store))
        if used + len(text) > self.limit:
            self.overflow[0] = True
            raise PrintLimitExceeded(self.limit)
        self.store.append(text)

    def flush(self) -> None:
        """Nothing to flush: `print(..., flush=True)` works as it does outside."""

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        kwargs["file"] = self
        print(*objects, **kwargs)


_INPLACE = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
}


def _inplacevar(op: str, left: Any, right: Any) -> Any:
    if op not in _INPLACE:
        raise TypeError(f"the operator {op} is not allowed")
    return _INPLACE[op](left, right)


def _apply(function: Any, *args: Any, **kwargs: Any) -> Any:
    """RestrictedPython's `_apply_`, through which it sends calls with `*args` or `**kwargs`."""
    return function(*args, **kwargs)


def _set_limits(limits: Mapping[str, Any]) -> None:
    import resource

    cpu = max(1, math.ceil(limits["cpu_seconds"]))
    memory = int(limits["memory_mb"]) * 1024 * 1024
    for name, value in (
        ("RLIMIT_CORE", 0),
        ("RLIMIT_FSIZE", 0),
        ("RLIMIT_CPU", cpu),
        ("RLIMIT_AS", memory),
        ("RLIMIT_NOFILE", 16),
        ("RLIMIT_NPROC", 0),
    ):
        if hasattr(resource, name):
            resource.setrlimit(getattr(resource, name), (value, value))


def _failure(error: BaseException, limits: Mapping[str, Any]) -> dict[str, str]:
    if isinstance(error, MemoryError):
        return {"rejected": f"the skill ran out of memory (limit {limits['memory_mb']} MB)"}
    if isinstance(error, PrintLimitExceeded):
        return {"rejected": str(error)}
    return {"error": _truncate(f"{type(error).__name__}: {error}")}


def _child_main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    init = json.loads(stdin.readline(MAX_INIT_BYTES))
    _set_limits(init["limits"])
    printed: list[str] = []
    overflow = [False]

    def send(message: dict[str, Any]) -> None:
        if overflow[0]:
            message = _failure(PrintLimitExceeded(limit), init["limits"])
        stdout.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        stdout.flush()

    def receive() -> dict[str, Any]:
        line = stdin.readline()
        if not line:
            os._exit(0)
        return json.loads(line)

    def exchange(action: list[Any]) -> dict[str, Any]:
        send({"action": action})
        return receive()["scene"]

    limit = int(init["limits"]["max_print_chars"])
    channel = coded_api.Channel(exchange)
    scope: dict[str, Any] = {
        "__builtins__": {name: getattr(builtins, name) for name in CHILD_BUILTINS},
        "__name__": "skill",
        "_getattr_": safer_getattr,
        "_getitem_": default_guarded_getitem,
        "_getiter_": default_guarded_getiter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": full_write_guard,
        "_inplacevar_": _inplacevar,
        "_apply_": _apply,
        "_print_": _Printer(printed, limit, overflow),
        **coded_api.make_api(channel, init["relation"]),
    }
    try:
        result = compile_restricted_exec(init["source"], "<skill>")
        if result.errors:
            raise SyntaxError(result.errors[0])
        exec(result.code, scope)
        skill = scope.get("skill")
        if not callable(skill):
            raise NameError("the source defines no function skill(blocks)")
    except BaseException as error:  # noqa: BLE001
        send(_failure(error, init["limits"]))
        return
    send({"ready": True})
    channel.begin(receive()["scene"])
    try:
        skill(list(init["blocks"]))
    except BaseException as error:  # noqa: BLE001
        send(_failure(error, init["limits"]))
        return
    send({"done": True, "printed": "".join(printed)})


if __name__ == "__main__":
    _child_main()
