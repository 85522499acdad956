"""The one-line form of a command-line setting refused by a check, shared by every learner's and
the datasets module's command line (a module of its own, so that both import it one way)."""

from __future__ import annotations

import dataclasses
import re


def usage_message(error: ValueError, args_type: type) -> str:
    """A check's message on one line, closed by the options of the Args fields it names (its
    words are field names such as total_timesteps; the option is --total-timesteps)."""
    message = " ".join(str(error).split())
    names = {item.name for item in dataclasses.fields(args_type)}
    named = [word for word in dict.fromkeys(re.findall(r"\w+", message)) if word in names]
    options = ", ".join(f"--{name.replace('_', '-')}" for name in named)
    return f"{message} (see {options} in --help)" if named else f"{message} (see --help)"
