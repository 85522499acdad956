"""Minari datasets: scripted-expert episodes, the one writer every dataset goes through, and loading
them as flat transition arrays.

Collect (every skill of the env, `episodes_per_skill` episodes each, sampled instructions):

    python -m gameon.baselines.datasets --env-id GameOn/MultiSkill-v0 --episodes-per-skill 200 \
        --noise-levels 0.0 0.3 0.6 --failed-fraction 0.2 --dataset-id gameon/multiskill-mixed-v0

Datasets live under `--datasets-path` (default `$MINARI_DATASETS_PATH`, else `datasets/` in the
working directory), at `DATASETS_PATH/DATASET_ID/`: Minari's `data/` folder (HDF5 episodes with
observations `state` + `goal`, actions, the env's rewards, terminations, truncations and
`infos["success"]`, one per step: the info of that step, with no entry for the reset as Minari's
DataCollector would write) and `episodes.json`, the per-episode record of instruction, skill,
policy, noise, seed and success. The same record is in Minari's per-episode metadata. Minari's
env spec and eval-env spec are both the collecting env's, with the kwargs it was made with (e.g.
`reward_mode`), so `recover_environment()` (with or without `eval_env=True`) gives its rewards.

`load` reads every episode into flat transition arrays (`OfflineData`) and splits episodes into
segments: a segment ends at a step whose termination or truncation flag is set, or at the
episode's end, and succeeded if that step's termination flag is set (the experimenter's
embodiment writes one segment per skill of a multi-skill episode; `collect` writes one per
episode). `chunk_indices` gives each transition's chunk of target rows within its segment, for
the action-chunking learners. Other per-step infos and per-episode metadata are ignored.

Minari's `DataCollector` needs jax to buffer steps, so episodes are buffered as numpy arrays and
written by `write_episodes` (with `minari.create_dataset_from_buffers`) once collected: the seed
datasets here and the experimenter's embodiment alike. A new version of a dataset is built in a
hidden staging folder beside it and swapped in with renames under a lock, so an interrupted write
loses nothing and two writers never interleave. Every episode's arrays are checked against the
env's spaces before anything is written, and image observations are stored losslessly (Minari
would JPEG-encode them). Episodes are appended to a dataset only if they were played with its env
spec's env id, step limit, kwargs and added wrappers and in its spaces; a dataset written before
its eval env spec carried the kwargs gets them on its next append.
Nothing is ever downloaded: loading uses `minari.load_dataset(..., download=False)`.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import minari
import numpy as np
from gymnasium.envs.registration import load_env_creator
from minari.data_collector.episode_buffer import EpisodeBuffer
from minari.dataset.minari_dataset import parse_dataset_id
from minari.dataset.minari_storage import MinariStorage
from minari.namespace import create_namespace, list_local_namespaces
from rich.progress import Progress

import gameon
from gameon.atomic import atomic_write, check_writable, file_lock
from gameon.baselines.usage import usage_message
from gameon.envs import ENV_SKILLS, language
from gameon.envs.experts import make_expert
from gameon.envs.stacking_env import block_colours
from gameon.policy import Normalizer, check_env_id, flat_observation, flat_size

EPISODES_FILE = "episodes.json"
"""Sidecar file (in the dataset's folder, beside Minari's `data/`) with per-episode records."""
SEED_LOW, SEED_HIGH = 2**20, 2**31
"""Episode reset seeds are drawn from this range, far from the evaluation suite's (10_000 + i)."""
MIN_VAR = 1e-4
"""Variance floor of the dataset normaliser, so near-constant features are not blown up."""
PROG = "python -m gameon.baselines.datasets"


def default_datasets_path() -> str:
    """`$MINARI_DATASETS_PATH` if set, else `datasets` in the working directory."""
    return os.environ.get("MINARI_DATASETS_PATH", "datasets")


@dataclass
class Args:
    """Collect scripted-expert episodes of every skill of an env into a Minari dataset, for BC and
    IQL to learn from."""

    env_id: str = "GameOn/MultiSkill-v0"
    """env to collect in; every skill it practises gets `episodes_per_skill` episodes"""
    dataset_id: str = "gameon/multiskill-expert-v0"
    """Minari dataset id, `(namespace/)name-vN`"""
    datasets_path: str = field(default_factory=default_datasets_path)
    """root folder of the Minari datasets ($MINARI_DATASETS_PATH if set, else ./datasets)"""
    episodes_per_skill: int = 200
    """episodes per skill of the env"""
    noise: float = 0.0
    """std of the Gaussian action noise of the expert (ignored if `noise_levels` is given)"""
    noise_levels: tuple[float, ...] = ()
    """expert noise levels to cycle through across each skill's episodes, e.g. 0.0 0.3 0.6"""
    failed_fraction: float = 0.0
    """fraction of each skill's episodes played by `failed_policy` instead, so the data holds
    failures (mixed quality, for IQL)"""
    failed_policy: Literal["random", "noisy-expert"] = "random"
    """policy of those episodes: uniform random actions, or the expert with `failed_noise`"""
    failed_noise: float = 1.0
    """std of the expert's action noise in `noisy-expert` failure episodes"""
    reward_mode: Literal["sparse", "dense"] = "sparse"
    """rewards stored: the env's sparse oracle success or its dense staged reward"""
    seed: int = 0
    """seed of the instructions, the episode reset seeds and the policies' noise"""
    overwrite: bool = False
    """replace an existing dataset of the same id (otherwise that is an error)"""
    author: str = "gameon-rl"
    """author recorded in the dataset's metadata"""
    progress: bool = True
    """show a progress bar (in a log, not a terminal: a line per tenth of the episodes)"""


@dataclass
class OfflineData:
    """All transitions of a dataset as flat numpy arrays (one row per transition)."""

    dataset_id: str
    env_id: str
    observations: np.ndarray
    """(N, obs_size) float32: `state` then `goal`, as `policy.flat_observation` builds them"""
    actions: np.ndarray
    """(N, action_size) float32"""
    rewards: np.ndarray
    """(N,) float32"""
    next_observations: np.ndarray
    """(N, obs_size) float32"""
    terminals: np.ndarray
    """(N,) bool: the episode ended here (success); no bootstrapping from next_observations"""
    timeouts: np.ndarray
    """(N,) bool: the episode was cut here (time limit or unstable simulation)"""
    skills: np.ndarray
    """(N,) int64: index of the transition's skill in `language.SKILLS`"""
    episodes: np.ndarray
    """(N,) int64: Minari episode id of the transition"""
    segments: np.ndarray
    """(N,) int64: segment id, unique across the dataset, numbered in order. A segment is a run of
    steps ending at a step whose termination or truncation flag is set, or at the episode's end
    (a multi-skill episode of the embodiment holds one segment per skill; the goal changes at the
    boundary); a segment's transitions are contiguous rows"""
    segment_success: np.ndarray
    """(N,) bool: the transition's segment succeeded (its last step's termination flag is set)"""

    @property
    def size(self) -> int:
        """Number of transitions."""
        return int(self.rewards.shape[0])

    @property
    def num_episodes(self) -> int:
        """Number of distinct episodes."""
        return int(np.unique(self.episodes).size)

    @property
    def num_segments(self) -> int:
        """Number of distinct segments."""
        return int(np.unique(self.segments).size)

    def subset(self, rows: np.ndarray) -> OfflineData:
        """The transitions at `rows` (a boolean mask or sorted indices) as a new OfflineData.

        Keep or drop whole segments (e.g. `data.subset(data.segment_success)`), so that every
        kept segment stays contiguous.
        """
        arrays = {
            name: getattr(self, name)[rows]
            for name, value in vars(self).items()
            if isinstance(value, np.ndarray)
        }
        return OfflineData(dataset_id=self.dataset_id, env_id=self.env_id, **arrays)

    @property
    def obs_size(self) -> int:
        return int(self.observations.shape[1])

    @property
    def action_size(self) -> int:
        return int(self.actions.shape[1])


def root_folder(datasets_path: str | Path | None = None) -> Path:
    """The absolute datasets folder: `datasets_path`, else `default_datasets_path()`."""
    return Path(datasets_path or default_datasets_path()).resolve()


@contextlib.contextmanager
def datasets_root(datasets_path: str | Path) -> Iterator[Path]:
    """Point Minari at `datasets_path` (it reads MINARI_DATASETS_PATH) for the block's duration.

    It creates nothing, so that reading leaves no folder behind: a writer makes the folder first.
    """
    root = root_folder(datasets_path)
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        yield root
    finally:
        if previous is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous


def check_dataset_id(dataset_id: str) -> None:
    """Raise ValueError unless the id has Minari's form `(namespace/)name-vN`."""
    try:
        namespace, name, version = parse_dataset_id(dataset_id)
    except (ValueError, TypeError):
        raise ValueError(
            f"malformed dataset id {dataset_id!r}; use (namespace/)name-vN, "
            "e.g. gameon/multiskill-expert-v0"
        ) from None
    if not dataset_id.endswith(f"-v{version}"):
        # Minari reads -v01 as version 1 but keeps it in its own folder, beside -v1's.
        written = f"{namespace}/{name}" if namespace else name
        raise ValueError(
            f"dataset id {dataset_id!r} writes its version with leading zeros; use "
            f"{written}-v{version} (one id per version)"
        )


def dataset_dir(dataset_id: str, datasets_path: str | Path | None = None) -> Path:
    """The folder of a dataset: Minari's `data/` and the `episodes.json` sidecar are inside."""
    return root_folder(datasets_path) / dataset_id


def check_dataset_exists(dataset_id: str, datasets_path: str | Path | None = None) -> Path:
    """Return the dataset's folder; ValueError, creating nothing, unless Minari's `data/` folder
    is in it (where `minari.load_dataset` looks)."""
    check_dataset_id(dataset_id)
    root = root_folder(datasets_path)
    if (root / dataset_id / "data").is_dir():
        return root / dataset_id
    if not root.exists():
        where = f"datasets_path {root} does not exist"
    elif not root.is_dir():
        where = f"datasets_path {root} is a file, not a folder"
    elif (_old(root / dataset_id) / "data").is_dir():
        where = (
            f"an overwrite of it was interrupted and left the earlier version in "
            f"{_old(root / dataset_id)}; rename that folder back to {root / dataset_id} (the next "
            "write of this dataset does so first)"
        )
    elif (root / dataset_id).exists():
        where = f"{root / dataset_id} holds no Minari data folder"
    else:
        where = f"it is not under datasets_path {root}"
    raise ValueError(
        f"no dataset {dataset_id}: {where}; give the datasets_path it was written to, or write it "
        f"with `{PROG}`"
    )


def write_json(path: Path, payload: dict) -> None:
    """Write JSON atomically and durably (gameon.atomic: a synced temporary file, a rename)."""
    atomic_write(path, json.dumps(payload, indent=2) + "\n")


# -- writing: every dataset is built in a staging folder and swapped in under a lock -----------


@dataclass(frozen=True)
class Episode:
    """One episode to write: Minari's buffer (its id is assigned on writing), its `episodes.json`
    record and its Minari episode metadata (the record in a form HDF5 attributes can hold)."""

    buffer: EpisodeBuffer
    record: dict[str, Any]
    metadata: dict[str, Any]


@dataclass(frozen=True)
class DatasetInfo:
    """What a new dataset says about itself: Minari's fields and the `gameon` metadata."""

    env_id: str
    algorithm_name: str
    author: str
    code_permalink: str
    description: str
    gameon: dict[str, Any]


EXISTING = ("append", "replace", "refuse")
"""What `write_episodes` may do with a dataset already there."""


def write_episodes(
    env: gym.Env,
    dataset_id: str,
    episodes: Sequence[Episode],
    info: DatasetInfo,
    datasets_path: str | Path | None = None,
    existing: Literal["append", "replace", "refuse"] = "append",
) -> Path:
    """Write episodes to a dataset (created if missing) and return its folder.

    `existing` says what happens to a dataset already there: its episodes are kept and these
    follow them (append; a ValueError, before anything is copied, if `env`'s settings or spaces
    differ from the dataset's), it is replaced (replace), or a FileExistsError is raised
    (refuse). The new version is built in a hidden staging folder beside the dataset and swapped
    in with renames under a lock, so an interrupted write loses nothing and two writers never
    interleave.
    """
    check_dataset_id(dataset_id)
    if existing not in EXISTING:
        raise ValueError(f"unknown existing {existing!r}; accepted: {', '.join(EXISTING)}")
    if not episodes:
        raise ValueError("no episodes to record")
    _check_episodes(env, episodes)
    spec_json(env)
    root = root_folder(datasets_path)
    target = root / dataset_id
    check_datasets_folder(target.parent)
    check_not_a_file(target, dataset_id)
    with file_lock(target.with_name(f".{target.name}.lock"), timeout=None):
        _recover(target)
        if target.exists() and existing == "refuse":
            raise FileExistsError(
                f"dataset {dataset_id} already exists at {target}; append to it, replace it or "
                "choose another dataset id"
            )
        _ensure_namespace(dataset_id, root)
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-", dir=target.parent))
        try:
            new = stage / dataset_id
            if target.exists() and existing == "append":
                records = _check_appendable(env, target, dataset_id)
                shutil.copytree(target, new)
                _append(new, episodes, info.env_id, records)
            else:
                _create(env, stage, dataset_id, episodes, info)
            _swap_in(new, target)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return target


def _check_episodes(env: gym.Env, episodes: Sequence[Episode]) -> None:
    """ValueError, before anything is written, unless each episode holds n >= 1 steps (n + 1
    observations, n actions, rewards, terminations, truncations and infos) of `env`'s spaces'
    shapes: `load` refuses such an episode, and one appended makes the whole dataset unreadable."""
    for index, episode in enumerate(episodes):
        problem = _episode_problem(episode.buffer, env.observation_space, env.action_space)
        if problem:
            raise ValueError(
                f"episode {index} of those to write {problem}; nothing was written (an episode of "
                "n >= 1 steps holds n + 1 observations and n actions, rewards, terminations, "
                "truncations and infos, each of the env's spaces)"
            )


def _episode_problem(
    buffer: EpisodeBuffer, observation_space: gym.Space, action_space: gym.Space
) -> str:
    """What is wrong with one episode's arrays, or "" if nothing is."""
    actions = np.asarray(buffer.actions)
    steps = len(actions)
    if steps < 1:
        return "has no steps"
    for name in ("rewards", "terminations", "truncations"):
        if len(getattr(buffer, name)) != steps:
            return f"has {steps} actions but {len(getattr(buffer, name))} {name}"
    for name, values in _leaves(buffer.infos, "infos"):
        if len(values) != steps:
            return f"has {steps} actions but {len(values)} {name}"
    if actions.shape[1:] != action_space.shape:
        return f"has actions of shape {actions.shape[1:]}, not the env's {action_space.shape}"
    if non_finite({"actions": actions}):
        return "has actions that are not finite numbers"
    observations = buffer.observations
    if isinstance(observation_space, gym.spaces.Dict):
        if not isinstance(observations, dict) or set(observations) != set(observation_space):
            keys = sorted(observations) if isinstance(observations, dict) else "an array"
            return f"has observations {keys}, not the env's {sorted(observation_space)}"
        parts = {
            key: (np.asarray(observations[key]), observation_space[key]) for key in observations
        }
    elif isinstance(observations, dict):
        return f"has observations {sorted(observations)}, not the env's {observation_space}"
    else:
        parts = {"": (np.asarray(observations), observation_space)}
    for key, (values, space) in parts.items():
        name = f"observations[{key!r}]" if key else "observations"
        if len(values) != steps + 1:
            return f"has {steps} actions but {len(values)} {name}"
        if space.shape is not None and values.shape[1:] != space.shape:
            return f"has {name} of shape {values.shape[1:]}, not the env's {space.shape}"
        if non_finite({name: values}):
            return f"has {name} that are not finite numbers"
    return ""


def _leaves(infos: Any, name: str) -> Iterator[tuple[str, Any]]:
    """Each per-step array of a (nested) infos dict, with its name."""
    if isinstance(infos, dict):
        for key, value in infos.items():
            yield from _leaves(value, f"{name}[{key!r}]")
    elif infos is not None:
        yield name, infos


def spec_json(env: gym.Env) -> str | None:
    """The env's spec as JSON, which Minari stores so `recover_environment` can remake the env;
    ValueError if a wrapper's argument cannot be written (a function, e.g. TransformReward's)."""
    if env.spec is None:
        return None
    try:
        return env.spec.to_json()
    except (TypeError, ValueError) as error:
        wrappers = ", ".join(w.name for w in env.spec.additional_wrappers) or "none"
        raise ValueError(
            f"the env's spec cannot be stored with the dataset ({error}; its wrappers: "
            f"{wrappers}): Minari keeps it so recover_environment() can remake the env; give "
            "wrappers arguments JSON can hold (no functions), or write the unwrapped env's episodes"
        ) from None


def _create(
    env: gym.Env, stage: Path, dataset_id: str, episodes: Sequence[Episode], info: DatasetInfo
) -> None:
    """Write a new dataset of these episodes under the staging root.

    The env's spec is stored as the eval env too (not the bare id's registered spec), so that
    `recover_environment(eval_env=True)` makes the env with the kwargs the episodes were played
    with (e.g. `reward_mode`) and gives the dataset's rewards."""
    with datasets_root(stage):
        dataset = minari.create_dataset_from_buffers(
            dataset_id=dataset_id,
            buffer=[replace(e.buffer, id=i) for i, e in enumerate(episodes)],
            env=env,
            eval_env=env.spec if env.spec is not None else info.env_id,
            jpeg_encoding=False,
            algorithm_name=info.algorithm_name,
            author=info.author,
            author_email="n/a",
            code_permalink=info.code_permalink,
            description=info.description,
        )
        dataset.storage.update_metadata({"gameon": info.gameon})
    _write_records(stage / dataset_id, dataset.storage, 0, episodes, {}, info.env_id)


NOT_GIVEN = "not given (the env's default)"
"""How a refused append names an env kwarg that one side's spec does not record."""
NOT_ABOUT_THE_EPISODES = ("render_mode",)
"""Env kwargs that change how an env may be watched, not its episodes: an append ignores them."""


def _env_settings(spec_json: str | None) -> dict[str, Any]:
    """What a JSON env spec says about how its episodes were played: env id, step limit, kwargs
    and the wrappers `gym.make` was not asked for (e.g. a ClipReward around the env)."""
    if spec_json is None:
        return {}
    spec = json.loads(spec_json)
    kwargs = {k: v for k, v in spec["kwargs"].items() if k not in NOT_ABOUT_THE_EPISODES}
    return {
        "env_id": spec["id"],
        "max_episode_steps": spec["max_episode_steps"],
        "additional_wrappers": spec.get("additional_wrappers") or [],
        **kwargs,
    }


def _defaults(env_id: str) -> dict[str, Any]:
    """The kwargs an env id is made with when none are given: its registration's, then its
    constructor's defaults, as a JSON spec would record them (so `_mismatch` can tell a kwarg
    given at its default from one left out)."""
    try:
        spec = gym.spec(env_id)
        creator = (
            load_env_creator(spec.entry_point)
            if isinstance(spec.entry_point, str)
            else spec.entry_point
        )
        parameters = inspect.signature(creator).parameters.values()
    except (gym.error.Error, ImportError, AttributeError, TypeError, ValueError):
        return {}
    defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    try:
        return json.loads(json.dumps({**defaults, **spec.kwargs}))
    except (TypeError, ValueError):
        return {}


def _difference(name: str, old: dict[str, Any], new: dict[str, Any], defaults: dict) -> str:
    """One setting that differs, as a refused append names it: the dataset's value (`old`), then
    these episodes' (`new`)."""
    default = NOT_GIVEN
    if name in defaults:
        default = f"not given (the env's default, {defaults[name]!r})"
    there = f"{name}={old[name]!r}" if name in old else f"{name} {default}"
    here = repr(new[name]) if name in new else default
    return f"{there} there, {here} here"


def _same_setting(name: str, old: Any, new: Any) -> bool:
    """Whether two values of an env kwarg play the same episodes: equal, or for `blocks` the same
    colours in the same order (3 and ["red", "green", "blue"] alike)."""
    if old == new:
        return True
    if name != "blocks":
        return False
    try:
        return block_colours(old) == block_colours(new)
    except (ValueError, TypeError):
        return False


def _mismatch(env: gym.Env, storage: MinariStorage, old: dict[str, Any]) -> str:
    """How `env` differs from the env a dataset's episodes were played in (`old`, its spec's
    `_env_settings`, then its spaces), or "" if it does not. A kwarg one side leaves out matches
    the other's only if that is the env's default."""
    new = _env_settings(spec_json(env))
    defaults = _defaults(new["env_id"]) if "env_id" in new else {}
    missing = object()
    differences = [
        _difference(name, old, new, defaults)
        for name in {**old, **new}
        if not _same_setting(
            name,
            old.get(name, defaults.get(name, missing)),
            new.get(name, defaults.get(name, missing)),
        )
    ]
    if differences:
        return f"other env settings than these ({'; '.join(differences)})"
    if storage.observation_space != env.observation_space:
        return f"observations {storage.observation_space}, not {env.observation_space}"
    if storage.action_space != env.action_space:
        return f"actions {storage.action_space}, not {env.action_space}"
    return ""


def _check_appendable(env: gym.Env, target: Path, dataset_id: str) -> dict[int, dict]:
    """The dataset's episode records, once `env`'s episodes can follow its own: ValueError, before
    anything is copied, unless they mean what the dataset's do (`_mismatch`) and its
    `episodes.json` is sound."""
    try:
        metadata = MinariStorage.read_raw_metadata(target / "data")
        storage = MinariStorage.read(target / "data")
        settings = _env_settings(metadata.get("env_spec"))
    except UNREADABLE as error:
        raise ValueError(
            f"cannot append to dataset {dataset_id}: {target} is not a readable Minari dataset "
            f"({type(error).__name__}: {error})"
        ) from None
    mismatch = _mismatch(env, storage, settings)
    if mismatch:
        raise ValueError(
            f"cannot append to dataset {dataset_id} at {target}: its episodes were played with "
            f"{mismatch}; one dataset would hold episodes that mean different things: write these "
            "episodes to a new dataset id, or replace the dataset (existing='replace', or "
            "collect's --overwrite)"
        )
    sidecar = target / EPISODES_FILE
    if not sidecar.is_file() and storage.total_episodes:
        raise ValueError(
            f"cannot append to dataset {dataset_id}: it has no {sidecar}, so the records of its "
            f"{storage.total_episodes} episodes would be lost; restore that file, or write these "
            "episodes to a new dataset id"
        )
    try:
        records = _read_records(sidecar, dataset_id) if sidecar.is_file() else {}
    except ValueError as error:
        raise ValueError(
            f"cannot append to dataset {dataset_id}: {error}; repair that file, or write these "
            "episodes to a new dataset id"
        ) from None
    clash = sorted(key for key in records if key >= storage.total_episodes)
    if clash:
        raise ValueError(
            f"cannot append to dataset {dataset_id}: {sidecar} records episodes {clash} that "
            f"Minari's data does not have (it has {storage.total_episodes} episodes); repair that "
            "file, or write these episodes to a new dataset id"
        )
    return records


def _append(
    folder: Path, episodes: Sequence[Episode], env_id: str, records: dict[int, dict]
) -> None:
    """Add episodes to the copy of a dataset in `folder`, after the ones it has (`records`, from
    its `episodes.json`, as `_check_appendable` read them)."""
    storage = MinariStorage.read(folder / "data")
    first = storage.total_episodes
    storage.update_episodes([replace(e.buffer, id=first + i) for i, e in enumerate(episodes)])
    _record_env_kwargs(storage)
    existing = {str(key): record for key, record in records.items()}
    _write_records(folder, storage, first, episodes, existing, env_id)


def _record_env_kwargs(storage: MinariStorage) -> None:
    """Give a dataset written before eval env specs carried the env's kwargs (its eval env spec is
    the bare env id's registered one) its env spec as eval env spec, as `_create` does."""
    env_spec, eval_spec = storage.metadata.get("env_spec"), storage.metadata.get("eval_env_spec")
    if env_spec is None or eval_spec is None or eval_spec == env_spec:
        return
    env, bare = json.loads(env_spec), json.loads(eval_spec)
    if bare["id"] == env["id"] and all(
        key in env["kwargs"] and env["kwargs"][key] == value
        for key, value in bare["kwargs"].items()
    ):
        storage.update_metadata({"eval_env_spec": env_spec})


def _write_records(
    folder: Path,
    storage: MinariStorage,
    first: int,
    episodes: Sequence[Episode],
    existing: dict[str, Any],
    env_id: str,
) -> None:
    """Store each episode's record as Minari episode metadata and in `episodes.json`."""
    ids = list(range(first, first + len(episodes)))
    storage.update_episode_metadata([e.metadata for e in episodes], ids)
    records = {**existing, **{str(i): e.record for i, e in zip(ids, episodes, strict=True)}}
    dataset_id = storage.metadata["dataset_id"]
    write_json(
        folder / EPISODES_FILE, {"dataset_id": dataset_id, "env_id": env_id, "episodes": records}
    )


def _old(target: Path) -> Path:
    return target.with_name(f".{target.name}.old")


def _swap_in(new: Path, target: Path) -> None:
    """Replace `target` by `new`: the old version is moved aside, then removed."""
    if target.exists():
        target.rename(_old(target))
        new.rename(target)
        shutil.rmtree(_old(target))
    else:
        new.rename(target)


def _recover(target: Path) -> None:
    """Finish or roll back a swap that was interrupted, and drop stale staging folders."""
    old = _old(target)
    if old.exists():
        if target.exists():
            shutil.rmtree(old)
        else:
            old.rename(target)
    for stale in target.parent.glob(f".{target.name}.staging-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _ensure_namespace(dataset_id: str, root: Path) -> None:
    """Register the dataset id's Minari namespace under `root` if it is not there yet."""
    if "/" not in dataset_id:
        return
    namespace = dataset_id.rsplit("/", 1)[0]
    with datasets_root(root):
        if namespace not in list_local_namespaces():
            try:
                create_namespace(namespace)
            except ValueError:  # another writer made it first (Minari: "already exists")
                if namespace not in list_local_namespaces():
                    raise


FAILED_POLICIES = ("random", "noisy-expert")
"""The policies `Args.failed_policy` names (anything else `run_episode` plays as the expert)."""


def _check_args(args: Args) -> None:
    """ValueError for a setting `collect` cannot use, before it collects anything."""
    check_env_id(args.env_id)
    if args.env_id not in ENV_SKILLS:
        raise ValueError(f"{args.env_id} is not a GameOn stacking env: {', '.join(ENV_SKILLS)}")
    check_dataset_id(args.dataset_id)
    if args.episodes_per_skill < 1:
        raise ValueError(f"episodes_per_skill must be >= 1, got {args.episodes_per_skill}")
    if args.failed_policy not in FAILED_POLICIES:
        raise ValueError(
            f"unknown failed_policy {args.failed_policy!r}; accepted: {', '.join(FAILED_POLICIES)}"
        )
    if not 0.0 <= args.failed_fraction <= 1.0:
        raise ValueError(f"failed_fraction must be in [0, 1], got {args.failed_fraction}")
    if args.failed_fraction > 0 and failed_episodes(args) == 0:
        raise ValueError(
            f"failed_fraction {args.failed_fraction} of {args.episodes_per_skill} episodes per "
            "skill rounds to no failed episode; raise failed_fraction or episodes_per_skill"
        )
    for noise in (args.noise, args.failed_noise, *args.noise_levels):
        if not (math.isfinite(noise) and noise >= 0):
            raise ValueError(f"noise levels must be finite numbers >= 0, got {noise}")
    if args.seed < 0:
        raise ValueError(f"seed must be >= 0, got {args.seed}")


def failed_episodes(args: Args) -> int:
    """How many of each skill's episodes `failed_policy` plays: failed_fraction of them, rounded
    to the nearest whole number (halves to even)."""
    return int(round(args.failed_fraction * args.episodes_per_skill))


def check_not_a_file(target: Path, dataset_id: str) -> None:
    """ValueError if a file stands where the dataset's folder goes (it could not be replaced)."""
    if target.exists() and not target.is_dir():
        raise ValueError(
            f"{target} is a file, where dataset {dataset_id}'s folder goes; move it or choose "
            "another dataset id"
        )


def check_datasets_folder(folder: Path) -> None:
    """ValueError unless `folder` can be made and written: checked before collecting, so a bad
    --datasets-path does not throw the collected episodes away (they are only written at the
    end)."""
    try:
        check_writable(folder)
    except OSError as error:
        raise ValueError(
            f"cannot write the dataset under {folder} ({error}); choose another --datasets-path, "
            "or a dataset id whose namespace is not a file there"
        ) from None


def run_episode(env: gym.Env, instruction: str, seed: int, policy: str, noise: float) -> dict:
    """Play one episode with the scripted expert (or uniform random actions, policy="random").

    Returns Minari's buffer fields (observations has one more entry than actions) and per-step
    successes.
    """
    observation, _ = env.reset(seed=seed, options={"instruction": instruction})
    expert = make_expert(env, noise, seed)
    expert.reset()
    action_rng = np.random.default_rng(seed)
    observations = [observation]
    actions, rewards, terminations, truncations, successes = [], [], [], [], []
    done, info = False, {"success": False}
    while not done:
        if policy == "random":
            action = action_rng.uniform(-1.0, 1.0, size=env.action_space.shape)
            action = action.astype(np.float32)
        else:
            action = expert.act(observation)
        observation, reward, terminated, truncated, info = env.step(action)
        observations.append(observation)
        actions.append(action)
        rewards.append(float(reward))
        terminations.append(bool(terminated))
        truncations.append(bool(truncated))
        successes.append(bool(info["success"]))
        done = terminated or truncated
    return {
        "observations": {
            key: np.stack([o[key] for o in observations]) for key in ("state", "goal")
        },
        "actions": np.stack(actions).astype(np.float32),
        "rewards": np.asarray(rewards, np.float64),
        "terminations": np.asarray(terminations),
        "truncations": np.asarray(truncations),
        "successes": np.asarray(successes),
    }


NOT_RECORDED = ("datasets_path", "overwrite", "progress")
"""Args that say where and how a dataset is written, not what it holds: left out of its metadata,
so that the same settings and seed give the same bytes wherever the dataset is written."""


def recorded_args(args: Args) -> dict[str, Any]:
    """The collection's settings as the dataset's metadata records them (`collect_args`)."""
    return {key: value for key, value in asdict(args).items() if key not in NOT_RECORDED}


def collect(args: Args) -> minari.MinariDataset:
    """Run the scripted experts over every skill of the env and write a Minari dataset."""
    _check_args(args)
    target = dataset_dir(args.dataset_id, args.datasets_path)
    check_not_a_file(target, args.dataset_id)
    if (target.exists() or _old(target).exists()) and not args.overwrite:
        where = (
            target if target.exists() else f"{_old(target)}, where an interrupted overwrite left it"
        )
        raise FileExistsError(
            f"dataset {args.dataset_id} already exists at {where}; "
            "pass --overwrite to replace it or choose another --dataset-id"
        )
    check_datasets_folder(target.parent)

    skills, _ = ENV_SKILLS[args.env_id]
    env = gym.make(args.env_id, reward_mode=args.reward_mode)
    colours = env.unwrapped.colours
    rng = np.random.default_rng(args.seed)
    n_failed = failed_episodes(args)
    buffers, records = [], {}
    start = time.perf_counter()
    with Progress(disable=not args.progress, transient=True) as progress:
        total = len(skills) * args.episodes_per_skill
        task = progress.add_task("collecting", total=total)
        log_lines = args.progress and not progress.console.is_terminal  # a log: a line a tenth
        for skill in skills:
            failed = set(rng.permutation(args.episodes_per_skill)[:n_failed].tolist())
            for k in range(args.episodes_per_skill):
                episode_id = len(buffers)
                instruction = str(language.sample(skill, colours, rng))
                seed = int(rng.integers(SEED_LOW, SEED_HIGH))
                if k in failed:
                    policy = args.failed_policy
                    noise = args.failed_noise if policy == "noisy-expert" else 0.0
                else:
                    policy = "expert"
                    levels = args.noise_levels or (args.noise,)
                    noise = float(levels[k % len(levels)])
                episode = run_episode(env, instruction, seed, policy, noise)
                buffers.append(
                    EpisodeBuffer(
                        id=episode_id,
                        seed=seed,
                        options={"instruction": instruction},
                        observations=episode["observations"],
                        actions=episode["actions"],
                        rewards=episode["rewards"],
                        terminations=episode["terminations"],
                        truncations=episode["truncations"],
                        infos={"success": episode["successes"]},
                    )
                )
                records[str(episode_id)] = {
                    "instruction": instruction,
                    "skill": skill,
                    "policy": policy,
                    "noise": noise,
                    "seed": seed,
                    "success": bool(episode["successes"][-1]),
                    "length": int(len(episode["rewards"])),
                    "return": float(episode["rewards"].sum()),
                }
                done = sum(r["success"] for r in records.values())
                progress.update(
                    task, advance=1, description=f"{skill}: {done}/{len(records)} successes"
                )
                if log_lines and len(records) % math.ceil(total / 10) == 0:
                    print(
                        f"collected {len(records)}/{total} episodes ({done} successful), "
                        f"{time.perf_counter() - start:.0f} s",
                        flush=True,
                    )
    collection_time = time.perf_counter() - start

    info = DatasetInfo(
        env_id=args.env_id,
        algorithm_name="scripted-expert",
        author=args.author,
        code_permalink="gameon.baselines.datasets",
        description=(
            f"Scripted-expert episodes of {args.env_id} ({', '.join(skills)}), "
            f"{args.episodes_per_skill} per skill, expert noise "
            f"{list(args.noise_levels) or [args.noise]}, failed fraction "
            f"{args.failed_fraction} ({n_failed} of {args.episodes_per_skill} per skill played by "
            f"{args.failed_policy}), {args.reward_mode} rewards."
        ),
        gameon={
            "env_id": args.env_id,
            "skills": list(skills),
            "collect_args": recorded_args(args),
            "gameon_version": gameon.__version__,
        },
    )
    episodes = [Episode(b, records[str(b.id)], records[str(b.id)]) for b in buffers]
    existing = "replace" if args.overwrite else "refuse"
    write_episodes(env, args.dataset_id, episodes, info, args.datasets_path, existing)
    env.close()
    with datasets_root(args.datasets_path):
        dataset = minari.load_dataset(args.dataset_id, download=False)

    steps = sum(r["length"] for r in records.values())
    print(
        f"dataset {args.dataset_id} at {target}: {len(records)} episodes, {steps} steps, "
        f"{steps / collection_time:.0f} steps/s"
    )
    for skill in skills:
        mine = [r for r in records.values() if r["skill"] == skill]
        wins = sum(r["success"] for r in mine)
        print(f"  {skill:8s} {wins:4d}/{len(mine):<4d} successful episodes")
    return dataset


def episode_records(dataset_id: str, datasets_path: str | Path | None = None) -> dict[int, dict]:
    """The per-episode records of `episodes.json`: episode id -> instruction, skill, noise...

    ValueError, naming the dataset or the file, if the dataset is not there or the file is
    missing or damaged."""
    path = check_dataset_exists(dataset_id, datasets_path) / EPISODES_FILE
    if not path.is_file():
        raise ValueError(f"dataset {dataset_id} has no {EPISODES_FILE} at {path}")
    return _read_records(path, dataset_id)


def _read_records(path: Path, dataset_id: str) -> dict[int, dict]:
    """The records of an `episodes.json` file; ValueError naming it if it is damaged."""
    try:
        episodes = json.loads(path.read_text())["episodes"]
        return {int(key): dict(value) for key, value in episodes.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"{path} is not a readable record of dataset {dataset_id}'s episodes "
            f"({type(error).__name__}: {error})"
        ) from None


def load(dataset_id: str, datasets_path: str | Path | None = None) -> OfflineData:
    """Read every episode of a local Minari dataset into flat transition arrays.

    ValueError, naming the dataset, if it is not there, cannot be read (a damaged file) or is
    not a GameOn dataset (observations other than the dict of `state` and `goal`)."""
    check_dataset_exists(dataset_id, datasets_path)
    with datasets_root(root_folder(datasets_path)) as root:
        try:
            return _read(dataset_id)
        except WrongDataset:
            raise
        except UNREADABLE as error:
            # a truncated HDF5 file, a broken metadata.json, a missing data field: say which
            # dataset, rather than h5py's or json's words alone (or a traceback)
            raise ValueError(
                f"dataset {dataset_id} at {root / dataset_id} is not a readable Minari dataset "
                f"({type(error).__name__}: {error})"
            ) from None


UNREADABLE = (OSError, ValueError, KeyError, TypeError, AssertionError, AttributeError)
"""What Minari, h5py and json raise on a damaged dataset folder (Minari checks with assert; a
metadata.json that is JSON but not an object fails as an AttributeError)."""


class WrongDataset(ValueError):
    """A readable Minari dataset that BC and IQL cannot learn from (said as it is, not as an
    unreadable one)."""


def _read(dataset_id: str) -> OfflineData:
    """`load`'s reading, with MINARI_DATASETS_PATH already pointed at the datasets' root."""
    dataset = minari.load_dataset(dataset_id, download=False)
    space = dataset.observation_space
    if not (isinstance(space, gym.spaces.Dict) and {"state", "goal"} <= set(space.spaces)):
        raise WrongDataset(
            f"dataset {dataset_id} holds observations {space}, not GameOn's dict of 'state' and "
            f"'goal': BC and IQL learn from datasets written by `{PROG}` (or the experimenter)"
        )
    metadata = dataset.storage.metadata
    spec_id = dataset.env_spec.id if dataset.env_spec is not None else ""
    env_id = metadata.get("gameon", {}).get("env_id") or spec_id
    columns: dict[str, list[np.ndarray]] = {
        key: []
        for key in (
            "observations", "actions", "rewards", "next_observations",
            "terminals", "timeouts", "skills", "episodes", "segments", "segment_success",
        )
    }  # fmt: skip
    first_segment = 0
    for episode in dataset.iterate_episodes():  # infos beyond what is read here are ignored
        states, goals = episode.observations["state"], episode.observations["goal"]
        length = len(episode.rewards)
        check_episode_lengths(episode, length)
        check_finite_steps(episode)
        skill = np.argmax(goals[:length, : len(language.SKILLS)], 1)
        columns["observations"].append(flat_observation({"state": states, "goal": goals})[:-1])
        # A skill sequence records its next skill's goal in a segment's last observation: the
        # next observation keeps the transition's own goal, so a bootstrap values this task.
        next_observation = {"state": states[1:], "goal": goals[:-1]}
        columns["next_observations"].append(flat_observation(next_observation))
        columns["actions"].append(np.asarray(episode.actions, np.float32))
        columns["rewards"].append(np.asarray(episode.rewards, np.float32))
        columns["terminals"].append(np.asarray(episode.terminations, bool))
        columns["timeouts"].append(np.asarray(episode.truncations, bool))
        columns["skills"].append(skill.astype(np.int64))
        columns["episodes"].append(np.full(length, episode.id, np.int64))
        terminations = np.asarray(episode.terminations, bool)
        ends = terminations | np.asarray(episode.truncations, bool)
        ends[-1] = True  # the episode's end closes its last segment
        segment = np.concatenate(([0], np.cumsum(ends[:-1]))).astype(np.int64)
        columns["segments"].append(first_segment + segment)
        columns["segment_success"].append(terminations[ends][segment])
        first_segment += int(segment[-1]) + 1
    if not columns["rewards"]:
        raise WrongDataset(f"dataset {dataset_id} has no episodes")
    arrays = {key: np.concatenate(values) for key, values in columns.items()}
    return OfflineData(dataset_id=dataset_id, env_id=env_id, **arrays)


def check_episode_lengths(episode: Any, length: int) -> None:
    """ValueError unless an episode of `length` >= 1 steps holds length + 1 observations and
    length actions, terminations and truncations: arrays of a damaged file that disagree would
    pair observations with another step's actions without a word."""
    observations = {len(part) for part in episode.observations.values()}
    steps = {len(episode.actions), len(episode.terminations), len(episode.truncations)}
    if length < 1 or observations != {length + 1} or steps != {length}:
        raise ValueError(
            f"episode {episode.id} has {' / '.join(map(str, sorted(observations)))} "
            f"observations, {len(episode.actions)} actions and {length} rewards: an episode of "
            "n >= 1 steps has n + 1 observations and n of the rest"
        )


def check_finite_steps(episode: Any) -> None:
    """ValueError unless an episode's observations, actions and rewards are finite numbers: one
    NaN poisons the dataset's normaliser, and BC or IQL then train their whole budget on NaN."""
    name = non_finite(
        {
            **{f"observations[{key!r}]": value for key, value in episode.observations.items()},
            "actions": episode.actions,
            "rewards": episode.rewards,
        }
    )
    if name:
        raise ValueError(f"episode {episode.id} holds {name} that are not finite numbers")


def non_finite(arrays: Mapping[str, Any]) -> str:
    """The name of the first array of floats holding a NaN or an infinity, or "" (what an episode
    written, `_episode_problem`, or read, `check_finite_steps`, may not hold)."""
    for name, values in arrays.items():
        values = np.asarray(values)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            return name
    return ""


def chunk_indices(segments: np.ndarray, chunk_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of each transition's chunk of targets, and which of them are real.

    For row i: rows i, i + 1, ..., i + chunk_length - 1, each clamped to the last row of i's
    segment, so that a chunk never crosses a segment boundary (nor the end of the data); the mask
    is False on the clamped entries beyond the segment's end (padding, as ACT pads and masks).
    `segments` must hold each segment's rows contiguously (as `load` and `subset` keep them).
    Returns ((N, chunk_length) int64 rows, (N, chunk_length) bool mask).
    """
    if chunk_length < 1:
        raise ValueError(f"chunk_length must be >= 1, got {chunk_length}")
    n = len(segments)
    if n == 0:
        return np.zeros((0, chunk_length), np.int64), np.zeros((0, chunk_length), bool)
    starts = np.flatnonzero(np.diff(segments)) + 1
    if len(np.unique(segments)) != len(starts) + 1:
        raise ValueError("each segment's rows must be contiguous")
    lengths = np.diff(np.concatenate(([0], starts, [n])))
    last = np.repeat(np.concatenate((starts, [n])) - 1, lengths)
    rows = np.arange(n)[:, None] + np.arange(chunk_length)[None, :]
    mask = rows <= last[:, None]
    return np.minimum(rows, last[:, None]), mask


def check_compatible(data: OfflineData, env: gym.Env) -> None:
    """Raise ValueError if the dataset's observation or action sizes differ from the env's."""
    env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    expected = flat_size(env.observation_space)
    if data.obs_size != expected:
        raise ValueError(
            f"dataset {data.dataset_id} has observations of size {data.obs_size}, "
            f"env {env_id} expects {expected}"
        )
    actions = int(np.prod(env.action_space.shape))
    if data.action_size != actions:
        raise ValueError(
            f"dataset {data.dataset_id} has actions of size {data.action_size}, "
            f"env {env_id} expects {actions}"
        )


def observation_normalizer(data: OfflineData) -> Normalizer:
    """A normaliser fixed to the dataset's observation mean and variance (floored at MIN_VAR)."""
    return Normalizer(
        mean=data.observations.mean(0).astype(np.float64),
        var=np.maximum(data.observations.var(0).astype(np.float64), MIN_VAR),
        count=float(data.size),
    )


def main(args: Args) -> None:
    """Command-line entry: collect, or exit 2 with a one-line error that names the options it is
    about, as the learners' do (130 on Ctrl-C)."""
    try:
        collect(args)
    except (ValueError, FileExistsError) as error:
        print(f"{PROG}: error: {usage_message(error, Args)}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (a dataset is written whole or not at all)", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    import tyro

    main(tyro.cli(Args, prog=PROG))
