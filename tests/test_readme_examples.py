"""The READMEs' examples work as shown, so a renamed option or function fails here instead of in a
new user's first hour: every `gameon ...` and `python -m gameon...` command in the shell blocks of
README.md and results/ parses (parsing only: none runs), and README.md's Python examples run as
scripts (but the one that trains Stable-Baselines3 for 100k steps, whose path tests/test_sb3.py
takes with a small budget)."""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tyro

from gameon import cli
from gameon.benchmark.commands import HANDLERS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = [README, ROOT / "results" / "README.md", *sorted(ROOT.glob("results/*/README.md"))]
"""The READMEs whose shell blocks a user copies commands from."""
SHELL_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
LONG_EXAMPLE = ".learn(100_000)"
"""The Stable-Baselines3 example trains for minutes; tests/test_sb3.py runs its path briefly."""
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def readme_commands(text: str) -> list[list[str]]:
    """The gameon command lines of the shell blocks in `text`, each a list of words from the
    program on: continuation lines joined, comments, `&&` chains and VAR=value prefixes handled;
    a line with a shell variable is left out (its words are known only when it runs)."""
    commands = []
    for block in SHELL_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            if "$" in line:
                continue
            words = shlex.split(line, comments=True)
            while words:
                end = words.index("&&") if "&&" in words else len(words)
                command, words = words[:end], words[end + 1 :]
                while command and ENV_ASSIGNMENT.match(command[0]):
                    command.pop(0)
                if not command:
                    continue
                python_module = command[:2] == ["python", "-m"] and len(command) > 2
                program = command[2] if python_module else command[0]
                if program == "gameon" or program.startswith("gameon."):
                    commands.append(command)
    return commands


def parse(words: list[str]) -> object:
    """Parse a command line as its program would, without running it (tyro exits on a bad one)."""
    if words[0] == "python":
        module = importlib.import_module(words[2])
        return tyro.cli(module.Args, args=words[3:], prog=" ".join(words[:3]))
    name, rest = words[1], words[2:]
    if name in ("bench", "leaderboard"):
        options, _ = HANDLERS[(name, rest[0])]
        return tyro.cli(options, args=rest[1:], prog=f"gameon {name} {rest[0]}")
    options = {"envs": cli.Envs, "demo": cli.Demo, "experiment": cli.experiment_options()}[name]
    return tyro.cli(options, args=rest, prog=f"gameon {name}")


COMMANDS = [command for guide in GUIDES for command in readme_commands(guide.read_text())]


def test_the_readme_shows_commands_of_every_kind() -> None:
    """The extraction finds what the README shows, so the test below cannot pass on nothing."""
    programs = {" ".join(words[:2] if words[0] == "gameon" else words[:3]) for words in COMMANDS}
    assert {"gameon bench", "gameon demo", "gameon experiment", "gameon leaderboard"} <= programs
    assert "python -m gameon.baselines.ppo" in programs
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_a_readme_command_parses(words: list[str], capsys: pytest.CaptureFixture) -> None:
    try:
        parse(words)
    except SystemExit:
        pytest.fail(f"a README's `{shlex.join(words)}` does not parse:\n{capsys.readouterr().err}")


EXAMPLES = PYTHON_BLOCK.findall(README.read_text())


def test_the_readme_has_the_python_examples_this_runs() -> None:
    assert len(EXAMPLES) >= 4
    assert sum(LONG_EXAMPLE in example for example in EXAMPLES) == 1


@pytest.mark.parametrize(
    "example",
    [example for example in EXAMPLES if LONG_EXAMPLE not in example],
    ids=lambda example: f"example {EXAMPLES.index(example) + 1}",
)
def test_a_readme_python_example_runs(example: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(example)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"README.md's example failed:\n{example}\n{result.stderr}"
    if "print(" in example:
        assert result.stdout.strip(), f"README.md's example printed nothing:\n{example}"
