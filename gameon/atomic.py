"""Atomic, durable file writes, Ctrl-C and SIGTERM held back across files written together, and
the one exclusive lock, so readers never see half a file or a pair of files from two moments, and
two writers never interleave a read-modify-write (the report's outputs, the leaderboard, the
datasets, a results folder, a learner's checkpoint and eval.json)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

FILE_MODE = 0o644
"""Published files are world-readable (mkstemp would leave them private to the writer)."""


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    """Write `data` to `path` through a synced temporary file and a rename (`atomic_file`)."""
    payload = data.encode() if isinstance(data, str) else data
    with atomic_file(path, suffix=".tmp") as temporary:
        temporary.write_bytes(payload)
    return Path(path)


@contextlib.contextmanager
def atomic_file(path: str | Path, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path` for a library to write to; synced and renamed to
    `path` when the block ends, removed if it fails, so a write stopped midway (an error, Ctrl-C)
    leaves nothing and a finished one survives a crash. The temporary path ends in `suffix` (by
    default `path`'s own), for writers that pick their format by suffix, like imageio."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix if suffix is None else suffix
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        temporary.chmod(FILE_MODE)
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)
    _sync_directory(path.parent)


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""What `defer_signals` holds back: Ctrl-C, and the polite kill (`kill`, a job scheduler)."""


@contextlib.contextmanager
def defer_signals() -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) and SIGTERM until the block ends, then send each one held to the
    handler it would have reached (Python's raises KeyboardInterrupt; SIGTERM's default ends the
    process), so that files written together in the block (a checkpoint and its eval.json), or a
    runner's bookkeeping of a run it starts, are never left half done. Only where Python handles
    signals, in the main thread; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {}
    for signum in HELD_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is not None:  # None: set outside Python, which cannot put it back
            previous[signum] = signal.signal(signum, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


def check_writable(folder: str | Path) -> None:
    """Make `folder` and write a scratch file in it (removed at once): OSError if it cannot hold
    files, found before long work whose results it is to keep."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):
        pass


def out_of_space_line(error: BaseException) -> str | None:
    """One line for a write that failed on a full disk (or quota), h5py's included, which
    carries the errno only in its text (an OSError, or a RuntimeError from its library); None
    for any other error."""
    code = getattr(error, "errno", None)
    if code not in (errno.ENOSPC, errno.EDQUOT) and "No space left" not in str(error):
        return None
    filename = getattr(error, "filename", None)
    where = f" writing {filename}" if filename else ""
    return (
        f"no space left on the disk{where}: free some and run the same command again (what was "
        "finished or committed is kept, and files are written whole or not at all)"
    )


def write_failure_line(error: OSError) -> str | None:
    """One line for a write that failed on a full disk, or on a file or folder that cannot be
    written (permissions, a read-only filesystem); None for any other OSError."""
    line = out_of_space_line(error)
    if line is not None or not error.filename:
        return line
    if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        return None
    return (
        f"cannot write {error.filename}: {error.strerror}; make it writable and run the same "
        "command again (what was finished or committed is kept)"
    )


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def file_lock(path: str | Path, timeout: float | None = 60.0) -> Iterator[int]:
    """Hold an exclusive advisory lock on `path` (created if missing) and yield its descriptor.

    `timeout`: seconds to wait for another holder before a TimeoutError (0: do not wait; None:
    wait as long as it takes). The lock goes with the open file: a child process that inherits
    the descriptor keeps the lock until it ends too (the benchmark runner's workers rely on it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        if timeout is None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"{path} is held by another writer") from None
                    time.sleep(0.05)
        yield handle.fileno()
