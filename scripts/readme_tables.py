"""Print the README's generated Markdown tables: environments, oracle thresholds, leaderboard.

Run: python scripts/readme_tables.py   (tests/test_cli.py checks that README.md holds them)
"""

from __future__ import annotations

from pathlib import Path

from gameon.cli import examples
from gameon.envs import ENV_SKILLS, oracle


def envs_table() -> list[str]:
    """Markdown rows: every registered id, its skills, max steps and one example per skill."""
    lines = [
        "| id | skills | max steps | example instruction per skill |",
        "| --- | --- | --- | --- |",
    ]
    for env_id, (skills, max_steps) in ENV_SKILLS.items():
        text = "<br>".join(f'"{example}"' for example in examples(skills))
        lines.append(f"| `{env_id}` | {', '.join(skills)} | {max_steps} | {text} |")
    return lines


def _value(value: float | tuple[float, float]) -> str:
    if isinstance(value, tuple):
        return " to ".join(f"{v:g}" for v in value)
    return f"{value:.4g}"


def thresholds_table() -> list[str]:
    """Markdown rows: every constant in `oracle.THRESHOLDS` with its value and meaning."""
    lines = ["| constant | value | unit and meaning |", "| --- | --- | --- |"]
    for name, value, meaning in oracle.THRESHOLDS:
        lines.append(f"| `{name}` | {_value(value)} | {meaning} |")
    return lines


def leaderboard_table() -> list[str]:
    """Markdown rows of the published leaderboard, as results/LEADERBOARD.md holds them."""
    board = Path(__file__).resolve().parents[1] / "results" / "LEADERBOARD.md"
    return [line for line in board.read_text().splitlines() if line.startswith("|")]


if __name__ == "__main__":
    print("\n".join(envs_table()))
    print()
    print("\n".join(thresholds_table()))
    print()
    print("\n".join(leaderboard_table()))
