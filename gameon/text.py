"""Wording shared by the lines the commands print."""

from __future__ import annotations


def plural(count: int, noun: str) -> str:
    """The count and its noun, plural unless the count is 1 ("1 episode", "2 episodes")."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
