"""Checks of a run's files (`gameon.integrity`): what is wrong with a checkpoint, said once."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gameon.integrity import check_checkpoint, source_changes


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


def test_uncommitted_code_changes_are_named_by_a_digest(tmp_path: Path) -> None:
    """A record named its commit alone, though made in an edited tree: code edits anywhere in
    the checkout change the digest; untracked files, other files and results/ do not."""

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    for path, text in {
        "pkg/a.py": "a = 1\n",
        "other/b.toml": "b = 1\n",
        "results/c.py": "c\n",
    }.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text)
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.email=a@b.c", "-c", "user.name=n", "commit", "-qm", "start")
    package = tmp_path / "pkg"
    assert source_changes(package) is None
    (tmp_path / "results" / "c.py").write_text("changed\n")
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert source_changes(package) is None
    (tmp_path / "other" / "b.toml").write_text("b = 2\n")
    first = source_changes(package)
    assert first is not None and len(first) == 16
    (tmp_path / "other" / "b.toml").write_text("b = 3\n")
    assert source_changes(package) not in (None, first)
    assert source_changes("/") is None  # no checkout


def test_a_checkpoint_whose_normalizer_lost_a_field_is_a_value_error(tmp_path: Path) -> None:
    """Every damaged checkpoint is a ValueError naming it, but a normalizer dict without `var`
    was Normalizer's TypeError."""
    torch = pytest.importorskip("torch")
    from gameon.policy import Actor, Normalizer, load_checkpoint, save_checkpoint

    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, "bc", "GameOn/Reach-v0", Actor(4, 2, (8,)), Normalizer.zeros(4), {})
    payload = torch.load(path, weights_only=False)
    del payload["normalizer"]["var"]
    torch.save(payload, path)
    with pytest.raises(ValueError, match=f"{path}: its normalizer is not one \\("):
        load_checkpoint(path)
