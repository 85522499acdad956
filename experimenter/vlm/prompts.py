"""The experimenter's prompts: Markdown files filled with string.Template, plus a JSON context.

Each module's prompt lives in `prompts/{module}.md` (shipped as package data), so it can be
read and edited without touching code. `$name` fields are filled by `render_prompt`; JSON
braces in the prose are safe because string.Template only expands `$name`. Every prompt embeds
one fenced ```json block (`$context`): the statistics, library and task list the answer must
come from. The `rules` backend answers from that block alone (`extract_context`).
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

PROMPTS_DIR = Path(__file__).with_name("prompts")
MODULES = (
    "propose",
    "decompose",
    "retrieve",
    "analyse",
    "add_skill",
    "code_or_learn",
    "write_code",
)
_CONTEXT = re.compile(r"```json\n(.*?)\n```", re.DOTALL)


def load_prompt(module: str) -> string.Template:
    """The template of a module's prompt; ValueError naming the modules if it is unknown."""
    if module not in MODULES:
        raise ValueError(f"unknown prompt module {module!r}; accepted: {', '.join(MODULES)}")
    return string.Template((PROMPTS_DIR / f"{module}.md").read_text(encoding="utf-8"))


def render_prompt(module: str, context: dict[str, Any], **fields: Any) -> str:
    """Fill a module's prompt: `context` becomes its JSON block, `fields` its other $names."""
    text = json.dumps(context, indent=1, sort_keys=True, ensure_ascii=False)
    try:
        return load_prompt(module).substitute(context=text, **fields)
    except KeyError as error:
        raise ValueError(f"prompt {module!r} needs the field {error.args[0]!r}") from None
    except ValueError as error:  # an edited prompt file with a lone "$"
        raise ValueError(
            f"{PROMPTS_DIR / f'{module}.md'}: {error}; write $$ for a literal $"
        ) from None


def extract_context(prompt: str) -> dict[str, Any]:
    """The JSON context block of a rendered prompt; ValueError if it has none."""
    match = _CONTEXT.search(prompt)
    if match is None:
        raise ValueError("the prompt has no ```json context block")
    try:
        context = json.loads(match.group(1))
    except json.JSONDecodeError as error:
        raise ValueError(f"the prompt's context block is not JSON: {error}") from None
    if not isinstance(context, dict):
        raise ValueError("the prompt's context block must be a JSON object")
    return context
