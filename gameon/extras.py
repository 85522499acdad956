"""Which optional extra of pyproject.toml installs which module, so that every command answers a
missing one with one line naming the extra to install rather than a traceback."""

from __future__ import annotations

import importlib.util

EXTRAS = {
    "cli": ("tyro", "imageio", "imageio_ffmpeg", "rich", "pydantic"),
    "train": (
        "torch",
        "tyro",
        "tensorboard",
        "minari",
        "h5py",
        "imageio",
        "imageio_ffmpeg",
        "matplotlib",
    ),
    "vlm": ("google", "openai", "pydantic"),
    "bench": ("pydantic", "scipy", "matplotlib", "rich", "tyro"),
    "ray": ("ray",),
}
"""The modules each optional extra of pyproject.toml installs (minari[hdf5] brings h5py)."""
COMMAND_EXTRAS = {
    "envs": ("cli",),
    "demo": ("cli",),
    "experiment": ("train", "cli"),
    "bench run": ("train", "bench"),
    "bench report": ("bench",),
    "leaderboard submit": ("bench", "train"),
    "leaderboard audit": ("train", "bench"),
    "leaderboard html": ("bench",),
}
"""The extras each command uses, the one to suggest first for a module in several."""
LIBRARIES = {
    "torch": "PyTorch",
    "minari": "Minari",
    "h5py": "h5py (Minari's HDF5 storage)",
    "tensorboard": "TensorBoard",
    "scipy": "SciPy",
    "imageio_ffmpeg": "imageio-ffmpeg",
    "google": "google-genai",
    "ray": "Ray",
}
"""How a module is named to a person, where that differs from its import name."""
TORCH_CPU = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def missing_extra(command: str, error: ModuleNotFoundError) -> str | None:
    """One line naming the optional extra that provides the missing module, e.g. "gameon bench
    run needs PyTorch: pip install 'gameon-rl[train]' ..."; None if no extra provides it."""
    module = (error.name or "").split(".")[0]
    preferred = [*COMMAND_EXTRAS.get(command, ()), *EXTRAS]
    extra = next((name for name in preferred if module in EXTRAS.get(name, ())), None)
    if extra is None:
        return None
    library = LIBRARIES.get(module, module)
    line = f"gameon {command} needs {library}: pip install 'gameon-rl[{extra}]'"
    if module == "torch":
        line += f" (on a machine without a GPU, first the CPU build: {TORCH_CPU})"
    return line


def installed(module: str) -> bool:
    """Whether `module` can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def first_missing(command: str) -> str | None:
    """The first module of the command's extras (`COMMAND_EXTRAS`, in order, so PyTorch first
    for the training commands) that is not installed; None if all are, or for another command.
    Checked before a command starts, so that it stops before it makes a folder, and names torch
    (with its CPU build) rather than whichever module the command happens to import first."""
    for extra in COMMAND_EXTRAS.get(command, ()):
        for module in EXTRAS[extra]:
            if not installed(module):
                return module
    return None
