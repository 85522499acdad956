"""Evidence about a run's files: content hashes of a checkpoint, its weights and a dataset folder,
where a run ran (machine, package versions, git commit), and checks that a dataset (HDF5) or
checkpoint is intact.

The hashes serve two readers. The leaderboard rejects two runs that share a checkpoint (a run
copied under other seed labels), and the audit compares a re-trained run with its claim. The
checks serve a resumed collect run and an audit, which must never train on a truncated file.

`weights_sha256` hashes the trained numbers (actor tensors and normaliser) rather than the file,
since a checkpoint also embeds the run's arguments, whose paths name its run folder: two runs of
one seed in different folders save byte-different files with identical weights.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import platform
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import gameon

CHUNK = 1 << 20


@dataclass(frozen=True)
class BadFile:
    """A file a run needs that is missing, unreadable or not what was committed."""

    path: Path
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


INPUT_FILE_FIELDS = ("hand_curriculum", "coded_skills", "vlm_replay")
"""Config fields (a learner's Args, the collect loop's config) naming a file a run reads: a hand
curriculum's stages, a coded skill library, a VLM transcript (or the run folder holding it)."""


def input_file_digests(paths: Iterable[str | None]) -> dict[str, str | None]:
    """The sha256 of each file (or folder, `folder_sha256`) a run reads by a path of its settings
    (`INPUT_FILE_FIELDS`), keyed by the path as given, None where none can be read: a path alone
    would let an edited file, or the same relative path read from another folder, pass for the
    same input."""
    digests: dict[str, str | None] = {}
    for path in sorted({path for path in paths if isinstance(path, str)}):
        try:
            digests[path] = folder_sha256(path) if Path(path).is_dir() else file_sha256(path)
        except (OSError, ValueError):
            digests[path] = None
    return digests


def folder_files(folder: str | Path) -> list[Path]:
    """The files under a folder, in a stable order (their relative POSIX paths, sorted)."""
    folder = Path(folder)
    return sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.as_posix())


def folder_sha256(folder: str | Path) -> str:
    """The sha256 over a folder's files in a stable order: each file's relative path and the
    sha256 of its bytes."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"no folder at {folder}")
    digest = hashlib.sha256()
    for path in folder_files(folder):
        relative = path.relative_to(folder).as_posix()
        digest.update(f"{relative}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def weights_sha256(checkpoint: str | Path) -> str:
    """The sha256 of a checkpoint's actor (architecture and tensors) and normaliser, independent
    of the arguments and paths the file also holds; ValueError if it is not a checkpoint."""
    from gameon.policy import load_checkpoint

    actor, normalizer, payload = load_checkpoint(checkpoint)
    digest = hashlib.sha256()
    shape = {
        key: payload.get(key)
        for key in ("algo", "actor_kind", "hidden", "squash", "chunk_length", "binary_gripper")
    }
    shape["ensemble_decay"] = payload.get("ensemble_decay")
    digest.update(json.dumps(shape, sort_keys=True, default=str).encode())
    for name, tensor in sorted(actor.state_dict().items()):
        array = tensor.detach().cpu().contiguous().numpy()
        digest.update(f"\n{name} {array.dtype} {array.shape}\n".encode())
        digest.update(array.tobytes())
    if normalizer is not None:
        for name in ("mean", "var"):
            array = normalizer.to_dict()[name]
            digest.update(f"\nnormalizer.{name} {array.dtype} {array.shape}\n".encode())
            digest.update(array.tobytes())
        digest.update(f"\n{normalizer.count!r} {normalizer.clip!r}".encode())
    return digest.hexdigest()


def checkpoint_evidence(checkpoint: str | Path) -> dict[str, str]:
    """The record fields checkpoint_sha256 and weights_sha256 of a checkpoint file."""
    return {
        "checkpoint_sha256": file_sha256(checkpoint),
        "weights_sha256": weights_sha256(checkpoint),
    }


def platform_info() -> dict[str, str]:
    """The machine a run ran on, as far as floating point results depend on it: besides the CPU,
    the kernels NumPy's BLAS and torch picked for it, which environment variables can change
    (OPENBLAS_CORETYPE, ATEN_CPU_CAPABILITY)."""
    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "numpy_blas": numpy_blas_fingerprint(),
        "torch_cpu": _torch_cpu_capability(),
    }


@functools.cache
def numpy_blas_fingerprint() -> str:
    """How NumPy's BLAS rounds the env controller's products (J J^T, J v, J^T w for a 6x7 arm
    Jacobian that is a column slice of a wider one) over seeded random draws: 16 hex digits.

    OpenBLAS's AVX-512 and AVX2 kernels round them differently, and so give other trajectories.
    OpenBLAS picks its kernels once, when it loads, so the result is computed once a process.
    """
    rng = np.random.default_rng(0)
    digest = hashlib.sha256()
    for _ in range(64):
        jacobian = rng.normal(size=(6, 16))[:, :7]
        digest.update(np.matmul(jacobian, jacobian.T).tobytes())
        digest.update(np.matmul(jacobian, rng.normal(size=7)).tobytes())
        digest.update(np.matmul(jacobian.T, rng.normal(size=6)).tobytes())
    return digest.hexdigest()[:16]


def _torch_cpu_capability() -> str:
    try:
        import torch
    except ImportError:
        return "no torch"
    return torch.backends.cpu.get_cpu_capability()


CODE_PATHS = (":(top)*.py", ":(top)*.toml", ":(top,exclude)results")
"""The checkout's code as git pathspecs, from its top whatever folder git runs in."""
SOURCE_CHANGES = "gameon-rl uncommitted changes"
"""The versions key of a checkout's uncommitted source changes (absent when there are none)."""


def versions() -> dict[str, str | None]:
    """Installed versions of the packages a run's numbers depend on, and a digest of the
    checkout's uncommitted source changes where it has some (`source_changes`)."""
    found = {}
    for package in ("gameon-rl", "mujoco", "gymnasium", "torch", "minari", "numpy"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    changes = source_changes()
    if changes is not None:
        found[SOURCE_CHANGES] = changes
    return found


def source_changes(root: str | Path | None = None) -> str | None:
    """A digest of the uncommitted changes to the checkout's tracked code (.py and .toml files,
    results/ left out), None for a clean tree or no checkout: a commit alone does not name the
    code of a run made in an edited tree."""
    where = Path(root) if root is not None else Path(gameon.__file__).resolve().parent
    command = ["git", "diff", "HEAD", "--binary", "--", *CODE_PATHS]
    try:
        result = subprocess.run(command, cwd=where, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0 or not result.stdout:
        return None
    return hashlib.sha256(result.stdout).hexdigest()[:16]


def git_commit() -> str | None:
    """The source tree's git commit, if it is a git checkout."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(gameon.__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def check_checkpoint(path: str | Path) -> BadFile | None:
    """None if the checkpoint loads as a policy, else what is wrong with it."""
    from gameon.policy import load_checkpoint

    path = Path(path)
    if path.is_dir():
        return BadFile(path, "a folder, not a checkpoint file")
    if not path.is_file():
        return BadFile(path, "missing")
    try:
        load_checkpoint(path)
    except (ValueError, KeyError, TypeError) as error:
        detail = _first_line(error)
        for prefix in (f"{path} is ", f"{path}: "):  # BadFile names the path itself
            if detail.startswith(prefix):
                return BadFile(path, detail.removeprefix(prefix)[:200])
        return BadFile(path, f"not a readable checkpoint ({detail})"[:200])
    return None


def check_dataset(root: str | Path) -> list[BadFile]:
    """What is wrong with the files of a Minari datasets root: a missing root, an HDF5 file that
    does not open or whose arrays cannot be read (truncated), a JSON file that does not parse."""
    root = Path(root)
    if not root.is_dir():
        return [BadFile(root, "missing")]
    bad = []
    for path in folder_files(root):
        problem = None
        if path.suffix in (".hdf5", ".h5"):
            problem = _hdf5_problem(path)
        elif path.suffix == ".json":
            try:
                json.loads(path.read_bytes())
            except (ValueError, UnicodeDecodeError) as error:
                problem = f"not JSON ({_first_line(error)})"
        if problem is not None:
            bad.append(BadFile(path, problem))
    hdf5 = [p for p in folder_files(root) if p.suffix in (".hdf5", ".h5")]
    if not hdf5:
        bad.append(BadFile(root, "holds no HDF5 file"))
    return bad


def _hdf5_problem(path: Path) -> str | None:
    import h5py

    try:
        with h5py.File(path, "r") as file:
            file.visititems(_read_array)
    except Exception as error:  # noqa: BLE001  (h5py raises OSError, KeyError, RuntimeError...)
        return f"not a readable HDF5 file ({_first_line(error)[:160]})"
    return None


def _read_array(_: str, item: Any) -> None:
    """Read one HDF5 dataset whole (a truncated file fails here), keeping nothing."""
    import h5py

    if isinstance(item, h5py.Dataset):
        item[()]


def check_hashes(files: dict[str, str], base: str | Path) -> list[BadFile]:
    """Compare files (paths relative to base) with the sha256 committed for them."""
    base = Path(base)
    bad = []
    for relative, expected in files.items():
        path = base / relative
        if not path.is_file():
            bad.append(BadFile(path, "missing"))
        elif (actual := file_sha256(path)) != expected:
            size = path.stat().st_size
            bad.append(
                BadFile(
                    path,
                    f"truncated or corrupted: its sha256 is {actual[:12]}..., {expected[:12]}... "
                    f"was committed ({size} bytes now)",
                )
            )
    return bad


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
