"""Checks of a run's files (`gameon.integrity`): what is wrong with a checkpoint, said once."""

from __future__ import annotations

from pathlib import Path

import pytest

from gameon.integrity import check_checkpoint


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("junk.pt", "not a readable checkpoint (pickle data was truncated)"),
        (
            "dict.pt",
            "not a GameOn policy checkpoint (format gameon-policy-v2 or gameon-policy-v3)",
        ),
        ("folder", "a folder, not a checkpoint file"),
        ("absent.pt", "missing"),
    ],
)
def test_a_checkpoint_that_is_not_one_is_named_once_with_its_problem(
    tmp_path: Path, name: str, problem: str
) -> None:
    """A file that loaded but was no GameOn checkpoint read "x.pt: not a readable checkpoint x.pt
    is not a GameOn policy checkpoint (...)", and a folder was called missing."""
    torch = pytest.importorskip("torch")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    torch.save({"weights": [1, 2]}, tmp_path / "dict.pt")
    (tmp_path / "folder").mkdir()
    path = tmp_path / name
    assert str(check_checkpoint(path)) == f"{path}: {problem}"
