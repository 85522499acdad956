"""`gameon.atomic.defer_signals`: Ctrl-C or SIGTERM during files written together arrives once they
all are, to the handler it would have reached, and the handler in place before is back afterwards;
`atomic_file`: a file a library writes appears whole or not at all."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import pytest

from gameon.atomic import atomic_file, atomic_write, defer_signals


def test_ctrl_c_in_the_block_arrives_after_it_as_a_keyboard_interrupt(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), defer_signals():
        atomic_write(tmp_path / "first", "1")
        signal.raise_signal(signal.SIGINT)
        atomic_write(tmp_path / "second", "2")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["first", "second"]
    assert signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_goes_to_the_handler_in_place_before_and_only_once_the_block_ends() -> None:
    received: list[str] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append("handler")

    before = signal.signal(signal.SIGINT, handler)
    try:
        with defer_signals():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            received.append("block done")
        assert received == ["block done", "handler"]
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_block_without_ctrl_c_leaves_the_handler_as_it_was() -> None:
    before = signal.getsignal(signal.SIGINT)
    with defer_signals():
        pass
    assert signal.getsignal(signal.SIGINT) is before


def test_outside_the_main_thread_the_block_runs_as_it_is() -> None:
    """Python lets only the main thread set handlers (and delivers signals only there)."""
    ran: list[bool] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with defer_signals():
                ran.append(True)
        except BaseException as error:  # noqa: BLE001  (reported by the assertion below)
            errors.append(error)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join()
    assert ran == [True] and errors == []


def test_atomic_file_publishes_what_the_block_wrote_readable_by_all(tmp_path: Path) -> None:
    target = tmp_path / "new" / "clip.gif"
    with atomic_file(target) as temporary:
        assert temporary.parent == target.parent and temporary.suffix == ".gif"
        assert not target.exists()
        temporary.write_bytes(b"frames")
    assert target.read_bytes() == b"frames"
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["clip.gif"]


def test_atomic_file_stopped_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "clip"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_file(target, suffix=".mp4") as temporary:
        assert temporary.suffix == ".mp4"
        temporary.write_bytes(b"half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["clip"]


def test_sigterm_in_the_block_reaches_its_handler_after_it() -> None:
    """A `kill` (SIGTERM) between two files written together left them from two moments."""
    received: list[str] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        with defer_signals():
            signal.raise_signal(signal.SIGTERM)
            received.append("block done")
        assert received == ["block done", "SIGTERM"]
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, before)
