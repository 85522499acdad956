"""A vector env whose worker processes each step a slice of the envs, trading through shared memory.

`gameon.envs.make_vec("GameOn/Stack-v0", num_envs=8, workers=2)` is `gym.make_vec(...)` with this
vector env in place of gymnasium's SyncVectorEnv or AsyncVectorEnv; use it in a `with` block, or
call `close()`, so its workers end. Why: AsyncVectorEnv runs one
process per env and every step pickles each env's action and info dict through a pipe, which
costs about half a GameOn step. Here actions, observations, rewards, terminations and
truncations live in shared memory, a step is one byte to each worker and an empty reply back,
and an env's info dict travels only on the steps it differs from that env's previous one (a
reset, a success, a new instruction; info values other than plain scalars, e.g. arrays, travel
every step).

Semantics are SyncVectorEnv's for the same env factories, seeds and actions, in every
`AutoresetMode` (NEXT_STEP by default, SAME_STEP with `final_obs`/`final_info`, DISABLED):
observations, rewards, terminations, truncations and infos are equal, bit for bit, and
`reset(seed=..., options=...)` with `options["reset_mask"]`, `call`, `get_attr`, `set_attr` and
`render` behave the same. Differences: actions are cast to the action space's dtype before the
envs see them (those that are not real numbers are refused, finite ones beyond the dtype's range
held at its edge); seeds may be NumPy integers, and one seed for all envs must be a whole number
>= 0, checked before any env resets; an exception in a worker is raised again in the parent with
the worker's traceback as its cause; a worker that dies raises `WorkerError` and closes the vector
env; a `final_obs` entry is read back from shared memory, so a Discrete one is a NumPy integer
where SyncVectorEnv passes on the env's own (equal) int.

Supported spaces: Box, Discrete, MultiDiscrete, MultiBinary and Dict or Tuple of those; an env
with another (e.g. Text) is refused when the vector env is made, before any worker starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import math
import multiprocessing as mp
import numbers
import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from multiprocessing.connection import Connection
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec, load_env_creator
from gymnasium.error import ClosedEnvironmentError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import (
    CloudpickleWrapper,
    batch_space,
    create_shared_memory,
    read_from_shared_memory,
)

STEP = b"s"
"""The whole step request: the actions are already in shared memory."""
NO_INFO_CHANGE = b""
"""A worker's whole step reply when no env's info differs from its previous one."""
SPIN_SECONDS = 0.0005
"""How long a process polls for the other side's message before it sleeps in a blocking read:
about an env step, so the two sides of a step rarely sleep, since waking a sleeping process costs
tens of microseconds (more on a virtual machine); never longer, so a process that waits for
something slow (the learner's update, the next episode) gives its core back."""
CLOSE_TIMEOUT_S = 10.0
"""How long close() waits for a worker to close its envs before terminating it."""

Batch = dict[str, Any] | tuple[Any, ...] | np.ndarray
"""A batch of observations or actions: arrays with the env index first, nested as the space."""


class WorkerError(RuntimeError):
    """A worker process died or failed to start; the message names it and its envs."""


def make_vec(
    env_id: str | EnvSpec,
    num_envs: int = 1,
    workers: int | None = None,
    vector_kwargs: Mapping[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None = None,
    **kwargs: Any,
) -> SharedMemoryVectorEnv:
    """`num_envs` copies of `gym.make(env_id, **kwargs)`, each wrapped in `wrappers`, stepped by
    `workers` processes (default: one per CPU, at most one per env).

    The arguments are `gym.make_vec`'s but `vectorization_mode` (this is the shared-memory mode);
    `vector_kwargs` go to SharedMemoryVectorEnv (`autoreset_mode`, `copy`, `context`).
    `envs.spec` is each env's own spec: `make_vec(envs.spec, num_envs)` makes the envs again.
    """
    if "vectorization_mode" in kwargs:
        raise ValueError(
            "gameon.envs.make_vec always makes a SharedMemoryVectorEnv and takes no "
            f"vectorization_mode (got {kwargs['vectorization_mode']!r}); for gymnasium's sync or "
            "async vector envs call gym.make_vec(env_id, num_envs, vectorization_mode=...)"
        )
    if not _is_whole(num_envs) or num_envs < 1:
        raise ValueError(f"num_envs must be a whole number >= 1, got {num_envs!r}")
    if wrappers is not None and (
        callable(wrappers)
        or not isinstance(wrappers, Sequence)
        or not all(callable(wrapper) for wrapper in wrappers)
    ):
        raise ValueError(
            "wrappers must be a list of env wrappers (each called with an env, returning one), "
            f"e.g. wrappers=[gameon.envs.TargetRelative]; got {wrappers!r}"
        )
    spec = gym.spec(env_id) if isinstance(env_id, str) else env_id
    _check_render_mode(spec, {**spec.kwargs, **kwargs}.get("render_mode"))
    factory = EnvFactory(spec, dict(kwargs), tuple(wrappers or ()))
    envs = SharedMemoryVectorEnv([factory] * num_envs, workers=workers, **(vector_kwargs or {}))
    # Each env's spec as gym.make wrote it (gym.make's own max_episode_steps in the spec's field,
    # not among the env's kwargs; wrappers that record their arguments listed), so that
    # gym.make(envs.spec) and make_vec(envs.spec, num_envs) make the same envs again.
    envs.spec = envs.local.envs[0].spec
    return envs


def _check_render_mode(spec: EnvSpec, render_mode: Any) -> None:
    """ValueError naming the accepted render modes for one that is not text: gym.make fails on it
    with "'int' object has no attribute 'endswith'", naming neither the argument nor the modes."""
    if render_mode is None or isinstance(render_mode, str):
        return
    creator = spec.entry_point
    if isinstance(creator, str):
        creator = load_env_creator(creator)
    metadata = getattr(creator, "metadata", None)
    modes = list(metadata.get("render_modes") or ()) if isinstance(metadata, dict) else []
    if "rgb_array" in modes:
        modes += [mode for mode in ("human", "rgb_array_list") if mode not in modes]
    accepted = f" ({', '.join(modes)})" if modes else ""
    raise ValueError(
        f"render_mode must be None or the name of one of the env's render modes{accepted}, "
        f"got {render_mode!r}"
    )


@dataclasses.dataclass(frozen=True)
class EnvFactory:
    """Makes one env the way `gym.make_vec` does; picklable, so forkserver workers can use it."""

    spec: EnvSpec
    kwargs: dict[str, Any]
    wrappers: tuple[Callable[[gym.Env], gym.Env], ...] = ()

    def __call__(self) -> gym.Env:
        env = gym.make(self.spec, **self.kwargs)
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


@dataclasses.dataclass
class SharedBuffers:
    """The shared memory of one vector env; picklable only while a worker process starts.

    Multiprocessing's shared arrays are files in /dev/shm unlinked at creation, so nothing is left
    there even if every process is killed.
    """

    observations: Any
    final_observations: Any
    actions: Any
    rewards: Any
    terminations: Any
    truncations: Any

    @classmethod
    def allocate(
        cls, observation_space: gym.Space, action_space: gym.Space, n: int, ctx: Any
    ) -> SharedBuffers:
        return cls(
            observations=create_shared_memory(observation_space, n, ctx),
            final_observations=create_shared_memory(observation_space, n, ctx),
            actions=create_shared_memory(action_space, n, ctx),
            rewards=ctx.RawArray(ctypes.c_double, n),
            terminations=ctx.RawArray(ctypes.c_bool, n),
            truncations=ctx.RawArray(ctypes.c_bool, n),
        )

    def views(self, observation_space: gym.Space, action_space: gym.Space, n: int) -> Views:
        return Views(
            observations=read_from_shared_memory(observation_space, self.observations, n),
            final_observations=read_from_shared_memory(
                observation_space, self.final_observations, n
            ),
            actions=read_from_shared_memory(action_space, self.actions, n),
            rewards=np.frombuffer(self.rewards, dtype=np.float64),
            terminations=np.frombuffer(self.terminations, dtype=np.bool_),
            truncations=np.frombuffer(self.truncations, dtype=np.bool_),
        )


@dataclasses.dataclass
class Views:
    """NumPy arrays on SharedBuffers, env index first."""

    observations: Batch
    final_observations: Batch
    actions: Batch
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray


@dataclasses.dataclass
class Worker:
    """The parent's handle on one worker process and the envs it steps."""

    process: Any
    conn: Connection
    first: int
    stop: int

    def __str__(self) -> str:
        return f"worker {self.process.name} (envs {self.first} to {self.stop - 1})"


def row(batch: Batch, index: int) -> Any:
    """A copy of one env's entry of a batch."""
    if isinstance(batch, dict):
        return {key: row(value, index) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(row(value, index) for value in batch)
    return batch[index].copy()


def write_row(batch: Batch, index: int, value: Any) -> None:
    """Write one env's entry of a batch."""
    if isinstance(batch, dict):
        for key, part in batch.items():
            write_row(part, index, value[key])
    elif isinstance(batch, tuple):
        for part, value_part in zip(batch, value, strict=True):
            write_row(part, index, value_part)
    else:
        batch[index] = value


def write_batch(batch: Batch, value: Any) -> None:
    """Write a whole batch, cast to the batch's dtype; a batch of another shape, or of values that
    are not real numbers, is an error."""
    if isinstance(batch, dict):
        for key, part in batch.items():
            write_batch(part, value[key])
    elif isinstance(batch, tuple):
        for part, value_part in zip(batch, value, strict=True):
            write_batch(part, value_part)
    else:
        try:
            array = np.asarray(value)
        except ValueError as error:  # a ragged nesting of sequences
            raise ValueError(f"actions must have shape {batch.shape}: {error}") from None
        if array.shape != batch.shape:
            raise ValueError(f"actions must have shape {batch.shape}, got {array.shape}")
        if array.dtype.kind not in "biuf":  # numpy would cast text, drop imaginary parts
            raise ValueError(
                f"actions must be real numbers (bool, int or float), got dtype {array.dtype}"
            )
        if batch.dtype.kind == array.dtype.kind == "f" and array.itemsize > batch.itemsize:
            limit = np.finfo(batch.dtype).max  # finite beyond float32 stays finite, as the env
            array = np.clip(array, -limit, limit)  # would clip it; NaN and inf stay for the env
        batch[...] = array


def receive(conn: Connection) -> bytes:
    """The next message on `conn`: polled for up to SPIN_SECONDS, then waited for."""
    deadline = time.perf_counter() + SPIN_SECONDS
    while not conn.poll() and time.perf_counter() < deadline:
        pass
    return conn.recv_bytes()


def copy_infos(infos: dict[str, Any]) -> dict[str, Any]:
    """A copy of batched infos whose arrays the caller may change freely."""
    return {
        key: copy_infos(value) if isinstance(value, dict) else value.copy()
        for key, value in infos.items()
    }


SCALARS = (bool, int, float, str, np.generic)
FLOATS = (float, np.floating)


def same_info(info: Mapping[str, Any], previous: Mapping[str, Any] | None) -> bool:
    """Whether two infos are equal, judging only plain scalars equal (anything else differs) and
    0.0 and -0.0 different."""
    if previous is None or info.keys() != previous.keys():
        return False
    for key, value in info.items():
        before = previous[key]
        if type(value) is not type(before) or not isinstance(value, SCALARS) or value != before:
            return False
        signed_zero = value == 0 and isinstance(value, FLOATS)
        if signed_zero and math.copysign(1.0, value) != math.copysign(1.0, before):
            return False
    return True


class SharedMemoryVectorEnv(VectorEnv):
    """Vector env whose `workers` processes each step a contiguous slice of the envs.

    The calling process is one of them: it steps the first slice itself while the other
    `workers - 1` processes step theirs, so on a machine with a core per worker no process waits
    for a core (a parent that only waited would compete with its workers on a 2-core machine).
    See the module docstring for what is shared and what matches SyncVectorEnv. `context` is the
    multiprocessing start method: "forkserver" (default) starts workers from a clean process, safe
    whatever the parent holds (threads, torch, an EGL context); "fork" starts faster.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        workers: int | None = None,
        copy: bool = True,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        context: str = "forkserver",
    ) -> None:
        self.num_envs = len(env_fns)
        if self.num_envs < 1:
            raise ValueError("a vector env needs at least one env")
        if workers is None:
            workers = min(self.num_envs, _cpu_count())
        if not _is_whole(workers) or not 1 <= workers <= self.num_envs:
            raise ValueError(
                f"workers must be a whole number from 1 to num_envs={self.num_envs}, "
                f"got {workers!r}"
            )
        self.copy = copy
        self.context = context
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.workers: list[Worker] = []
        """the worker processes, each with its slice; the first slice is `local`'s"""
        self.local: EnvSlice | None = None

        first_env = env_fns[0]()
        self.metadata = {**first_env.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = first_env.render_mode
        self.single_observation_space = first_env.observation_space
        self.single_action_space = first_env.action_space
        envs = [first_env]  # this process's envs, closed if the vector env fails to start
        try:
            check_shared_space(self.single_observation_space, "observation_space")
            check_shared_space(self.single_action_space, "action_space")
            self.observation_space = batch_space(self.single_observation_space, self.num_envs)
            self.action_space = batch_space(self.single_action_space, self.num_envs)
            spaces = (self.single_observation_space, self.single_action_space)
            bounds = np.linspace(0, self.num_envs, workers + 1).round().astype(int).tolist()
            buffers = self._start_workers(env_fns, bounds, spaces)
            envs.extend(fn() for fn in env_fns[1 : bounds[1]])
            if unlike := spaces_unlike(envs, 0, spaces):
                raise RuntimeError(unlike)
        except BaseException:
            for env in envs:
                env.close()
            self.close(terminate=True)
            raise
        self.local = EnvSlice(envs, 0, self._views, self.autoreset_mode)
        results = self._receive(self.workers, "start")
        for worker, result in zip(self.workers, results, strict=True):
            if result:
                self.close(terminate=True)
                raise RuntimeError(f"{worker}: {result}")
        del buffers  # only now: a starting worker unpickles the buffers' locks, gone with them

    def _start_workers(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        bounds: list[int],
        spaces: tuple[gym.Space, gym.Space],
    ) -> SharedBuffers:
        """Allocate the shared memory and start a worker for each slice `bounds` gives after the
        first (this process's); they make their envs and report their spaces to `_receive`.

        Returns the buffers, which the caller keeps until every worker has reported: their
        locks' semaphores, which a starting worker unpickles, are removed once they are gone.
        """
        ctx = mp.get_context(self.context)
        buffers = SharedBuffers.allocate(*spaces, self.num_envs, ctx)
        self._views = buffers.views(*spaces, self.num_envs)
        self._env_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self._infos: dict[str, Any] | None = None
        """The batched infos of `_env_infos`, rebuilt only when one of them changes."""
        parent_ends = []
        for index, (first, stop) in enumerate(zip(bounds[1:-1], bounds[2:], strict=True)):
            parent_end, child_end = ctx.Pipe()
            parent_ends.append(parent_end)
            fns = [CloudpickleWrapper(fn) for fn in env_fns[first:stop]]
            process = ctx.Process(
                target=run_worker,
                name=f"SharedMemoryVectorEnv-{index + 1}",
                args=(
                    fns,
                    first,
                    child_end,
                    parent_ends,
                    buffers,
                    spaces,
                    self.autoreset_mode,
                ),
                daemon=True,
            )
            process.start()
            child_end.close()
            self.workers.append(Worker(process, parent_end, first, stop))
        return buffers

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """The np_random seed of each sub-env."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """The random generator of each sub-env."""
        return self.get_attr("np_random")

    def reset(
        self,
        *,
        seed: int | np.integer | Iterable[int | np.integer | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Batch, dict[str, Any]]:
        """Reset every sub-env, or those in `options["reset_mask"]`, with `options`."""
        self._check_open()
        seeds = _seeds(seed, self.num_envs)
        if len(seeds) != self.num_envs:
            raise ValueError(
                f"If seeds are passed as a list the length must match num_envs={self.num_envs} "
                f"but got length={len(seeds)}."
            )
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(
                "reset options must be a dict, e.g. {'reset_mask': mask, 'instruction': text}, "
                f"got {options!r}"
            )
        mask = np.ones(self.num_envs, np.bool_)
        if options is not None and "reset_mask" in options:
            options = dict(options)
            mask = _checked_mask(options.pop("reset_mask"), self.num_envs)

        def request(part: EnvSlice | Worker) -> tuple[Any, ...]:
            span = slice(part.first, part.stop)
            return (seeds[span], options, mask[span])

        busy = [w for w in self.workers if mask[w.first : w.stop].any()]
        for worker in busy:
            self._send(worker, pickle.dumps(("reset", request(worker))), "reset")
        local = None
        if mask[: self.local.stop].any():
            local = self._run_local(self.local.reset, *request(self.local))
        reset_infos: list[tuple[int, dict[str, Any]]] = []

        def keep(slice_infos: list[tuple[int, dict[str, Any]]]) -> None:
            for env_index, info in slice_infos:
                self._env_infos[env_index] = info
            reset_infos.extend(slice_infos)

        self._infos = None
        self._receive(busy, "reset", apply=keep, local=local)
        infos: dict[str, Any] = {}
        for env_index, info in sorted(reset_infos, key=lambda item: item[0]):
            infos = self._add_info(infos, info, env_index)
        return self._observations(), infos

    def step(
        self, actions: Any
    ) -> tuple[Batch, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with its action, resetting ended ones as `autoreset_mode` says."""
        self._check_open()
        views = self._views
        if self.autoreset_mode == AutoresetMode.DISABLED:
            ended = np.flatnonzero(views.terminations | views.truncations)
            if len(ended):
                raise RuntimeError(
                    f"sub-envs {ended.tolist()} have ended; with AutoresetMode.DISABLED reset "
                    "them (options={'reset_mask': ...}) before the next step"
                )
        write_batch(views.actions, actions)
        for worker in self.workers:
            self._send(worker, STEP, "step")
        local = self._run_local(self.local.step)
        finals: list[tuple[int, dict[str, Any]]] = []

        def keep(changes: list[tuple[int, dict[str, Any], dict[str, Any] | None]]) -> None:
            for env_index, info, final_info in changes:
                self._env_infos[env_index] = info
                self._infos = None
                if final_info is not None:
                    finals.append((env_index, final_info))

        self._receive(self.workers, "step", apply=keep, local=local)
        if self._infos is None:
            self._infos = self._batched(self._env_infos)
        infos = copy_infos(self._infos)
        for env_index, final_info in finals:
            final = {
                "final_obs": row(views.final_observations, env_index),
                "final_info": final_info,
            }
            infos = self._add_info(infos, final, env_index)
        return (
            self._observations(),
            views.rewards.copy(),
            views.terminations.copy(),
            views.truncations.copy(),
            infos,
        )

    def render(self) -> tuple[Any, ...]:
        """Each sub-env's render()."""
        return self.call("render")

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call the method `name` of every sub-env (or read it, if not callable)."""
        return self._each("call", lambda part: (name, args, kwargs))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """The attribute `name` of every sub-env."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set the attribute `name` of every sub-env: to values[i], or to values if not a list."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        self._each("set_attr", lambda part: (name, values[part.first : part.stop]))

    def close_extras(self, timeout: float = CLOSE_TIMEOUT_S, terminate: bool = False) -> None:
        """Close the envs here and in the workers and end them; terminate workers that do not end
        in time. The workers end, and the vector env is closed, even when an env's close()
        raises here (the error is raised once they have)."""
        for worker in self.workers if not terminate else ():
            with contextlib.suppress(OSError):
                worker.conn.send_bytes(pickle.dumps(("close", None)))
        try:
            if self.local is not None:
                local, self.local = self.local, None
                local.close()
        finally:
            for worker in self.workers:
                if not terminate:
                    worker.process.join(timeout)
                if worker.process.is_alive():
                    worker.process.terminate()
                    worker.process.join()
                worker.conn.close()
            self.workers = []
            self.closed = True

    def __enter__(self) -> SharedMemoryVectorEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """`with make_vec(...) as envs:` closes the envs and ends the workers however the block
        ends."""
        self.close()

    def __getstate__(self) -> NoReturn:
        """Refused, saying why and what to do: copy.copy made a copy sharing the workers, whose
        garbage collection ended them; copy.deepcopy and pickle failed deep in multiprocessing."""
        raise TypeError(
            f"a {type(self).__name__} cannot be copied or pickled: its envs live in its worker "
            "processes; make the same envs again with gameon.envs.make_vec(envs.spec, num_envs)"
        )

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and (
            getattr(self, "workers", None) or getattr(self, "local", None)
        ):
            self.close(terminate=True)

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(
                f"{type(self).__name__} is closed (by close(), a worker's death or an "
                "interrupted request); make a new one"
            )

    def _observations(self) -> Batch:
        observations = self._views.observations
        return _copy_batch(observations) if self.copy else observations

    def _batched(self, singles: Sequence[dict[str, Any]]) -> dict[str, Any]:
        infos: dict[str, Any] = {}
        for env_index, info in enumerate(singles):
            infos = self._add_info(infos, info, env_index)
        return infos

    def _each(
        self, command: str, data_for: Callable[[EnvSlice | Worker], tuple[Any, ...]]
    ) -> tuple[Any, ...]:
        """Run the command with its data on every slice, this process's too; return the results
        of every env, in order."""
        self._check_open()
        for worker in self.workers:
            self._send(worker, pickle.dumps((command, data_for(worker))), command)
        local = self._run_local(getattr(self.local, command), *data_for(self.local))
        return tuple(
            result
            for results in self._receive(self.workers, command, local=local)
            for result in results
        )

    def _run_local(self, method: Callable[..., Any], *args: Any) -> tuple[str, Any]:
        """This process's slice's reply to a command, as a worker would send it.

        An interruption here (Ctrl-C) closes the vector env, as one in `_receive` does: the
        workers sent the same command would leave their replies unread, to answer the next
        request before its results were written; and this slice's envs stand part done (some
        stepped, some not).
        """
        try:
            return "ok", method(*args)
        except Exception as error:
            self.local.sent_infos = [None] * len(self.local.envs)
            return "error", (error, traceback.format_exc())
        except BaseException:
            self.close(terminate=True)
            raise

    def _send(self, worker: Worker, message: bytes, command: str) -> None:
        try:
            worker.conn.send_bytes(message)
        except OSError:
            self._raise_dead(worker, command)

    def _raise_dead(self, worker: Worker, command: str) -> NoReturn:
        worker.process.join(1.0)
        code = worker.process.exitcode
        self.close(terminate=True)
        hint = ""
        if command == "start" and self.context != "fork":
            hint = (
                f" ({self.context} workers start by importing the main script: a script that "
                "builds the vector env, or trains, at its top level needs "
                '`if __name__ == "__main__":`; the worker\'s own error is on stderr above)'
            )
        raise WorkerError(
            f"{worker} died (exit code {code}) during {command}; the vector env is closed{hint}"
        ) from None

    def _receive(
        self,
        workers: Sequence[Worker],
        command: str,
        apply: Callable[[Any], None] | None = None,
        local: tuple[str, Any] | None = None,
    ) -> list[Any]:
        """This process's result (`local`, if its slice took part) and each worker's; raise the
        first exception once all are in.

        `apply` takes each result as it comes, so the parent keeps what the slices that
        succeeded sent even when another one raised.
        """
        replies: list[tuple[Any, tuple[str, Any]]] = []
        if local is not None:
            replies.append((self.local, local))
        for worker in workers:
            try:
                reply = receive(worker.conn)
            except (EOFError, OSError):
                self._raise_dead(worker, command)
            except BaseException:
                self.close(terminate=True)  # e.g. Ctrl-C: later replies would answer old requests
                raise
            replies.append((worker, ("ok", []) if reply == NO_INFO_CHANGE else _unpickled(reply)))
        results, errors = [], []
        for part, (status, payload) in replies:
            if status == "ok":
                results.append(payload)
                if apply is not None:
                    apply(payload)
            else:
                results.append([])
                errors.append((part, payload))
        if errors:
            part, (error, trace) = errors[0]
            cause = WorkerError(f"{part} raised during {command}:\n{trace}")
            if command == "start":
                self.close(terminate=True)
                raise cause
            raise (error or cause) from cause
        return results


def _unpickled(reply: bytes) -> tuple[str, Any]:
    """A worker's pickled reply as (status, payload); one that does not unpickle here (a result
    whose class cannot rebuild itself) becomes an error reply, so that `_receive` still reads
    every other worker's reply to the same request and none answers a later one."""
    try:
        return pickle.loads(reply)
    except Exception:
        trace = traceback.format_exc()
        return "error", (None, f"its reply could not be unpickled in the parent:\n{trace}")


SHARED_SPACES = (
    gym.spaces.Box,
    gym.spaces.Discrete,
    gym.spaces.MultiDiscrete,
    gym.spaces.MultiBinary,
)
"""The spaces whose samples are fixed-size arrays, which shared memory holds (alone or in Dict and
Tuple spaces)."""


def check_shared_space(space: gym.Space, where: str) -> None:
    """ValueError naming the first part of `space` (`where`: its path) that shared memory cannot
    hold, e.g. a Text space, whose samples are strings of any length."""
    if isinstance(space, gym.spaces.Dict):
        for key, part in space.spaces.items():
            check_shared_space(part, f"{where}[{key!r}]")
    elif isinstance(space, gym.spaces.Tuple):
        for index, part in enumerate(space.spaces):
            check_shared_space(part, f"{where}[{index}]")
    elif not isinstance(space, SHARED_SPACES):
        raise ValueError(
            f"the env's {where} is {space}, which the shared-memory vector env cannot hold (it "
            "holds Box, Discrete, MultiDiscrete and MultiBinary spaces, alone or in Dict and "
            "Tuple); use gymnasium's vector envs: gym.make_vec(env_id, num_envs, "
            "vectorization_mode='sync' or 'async')"
        )


def _is_whole(value: Any) -> bool:
    """An integer, numpy's included, but not a bool (a count given as True is a mistake)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _seeds(seed: Any, num_envs: int) -> list[Any]:
    """Each env's seed, NumPy integers made Python ints (gymnasium's reset takes only those).

    One number seeds env i with seed + i and must be a whole number >= 0, checked before any env
    resets (a bool is a mistake); a list's entries go to their envs as given, so one that its env
    refuses fails there alone, as in SyncVectorEnv.
    """
    if seed is None:
        return [None] * num_envs
    if _is_whole(seed) and seed >= 0:
        return [int(seed) + i for i in range(num_envs)]
    unordered = isinstance(seed, Mapping | AbstractSet)  # which env gets which seed?
    if (
        isinstance(seed, numbers.Number | str | bytes)
        or unordered
        or not isinstance(seed, Iterable)
        or np.ndim(seed) == 0  # a 0-d array: iterable by type, not in fact
    ):
        raise ValueError(
            "seed must be None, a whole number >= 0 (a Python or NumPy integer, not a bool: env "
            f"i gets seed + i) or a list of num_envs={num_envs} such seeds or None, got {seed!r}"
        )
    return [int(entry) if _is_whole(entry) else entry for entry in seed]


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _checked_mask(mask: Any, num_envs: int) -> np.ndarray:
    """`options["reset_mask"]`, validated as SyncVectorEnv does."""
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (num_envs,):
        raise ValueError(
            f"`options['reset_mask']` must have shape `({num_envs},)`, got {mask.shape}"
        )
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError(
            "`options['reset_mask']` must contain a boolean array with at least one True value, "
            f"got reset_mask={mask}"
        )
    return mask


def _copy_batch(batch: Batch) -> Batch:
    if isinstance(batch, dict):
        return {key: _copy_batch(value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_copy_batch(value) for value in batch)
    return batch.copy()


class EnvSlice:
    """A worker's envs, stepped in order, writing their results to shared memory."""

    def __init__(
        self, envs: list[gym.Env], first: int, views: Views, autoreset_mode: AutoresetMode
    ) -> None:
        self.envs = envs
        self.first = first
        self.views = views
        self.autoreset_mode = autoreset_mode
        self.ended = [False] * len(envs)
        self.sent_infos: list[dict[str, Any] | None] = [None] * len(envs)
        """Each env's info as the parent last received it; None forces the next one to go."""

    @property
    def stop(self) -> int:
        """One past the index of the slice's last env."""
        return self.first + len(self.envs)

    def __str__(self) -> str:
        return f"the calling process (envs {self.first} to {self.stop - 1})"

    def step(self) -> list[tuple[int, dict[str, Any], dict[str, Any] | None]]:
        """Step each env; return (env index, info, final info) for each info the parent lacks."""
        views, changes = self.views, []
        for offset, env in enumerate(self.envs):
            index = self.first + offset
            final_info = None
            if self.autoreset_mode == AutoresetMode.NEXT_STEP and self.ended[offset]:
                observation, info = env.reset()
                reward, terminated, truncated = 0.0, False, False
            else:
                action = row(views.actions, index)
                observation, reward, terminated, truncated, info = env.step(action)
                if self.autoreset_mode == AutoresetMode.SAME_STEP and (terminated or truncated):
                    write_row(views.final_observations, index, observation)
                    final_info = info
                    observation, info = env.reset()
            self.ended[offset] = bool(terminated or truncated)
            write_row(views.observations, index, observation)
            views.rewards[index] = reward
            views.terminations[index] = terminated
            views.truncations[index] = truncated
            if final_info is not None or not same_info(info, self.sent_infos[offset]):
                self.sent_infos[offset] = dict(info)
                changes.append((index, info, final_info))
        return changes

    def reset(
        self, seeds: list[int | None], options: dict[str, Any] | None, mask: np.ndarray
    ) -> list[tuple[int, dict[str, Any]]]:
        """Reset the envs in the mask; return (env index, info) of each."""
        views, infos = self.views, []
        for offset, env in enumerate(self.envs):
            if not mask[offset]:
                continue
            index = self.first + offset
            observation, info = env.reset(seed=seeds[offset], options=options)
            write_row(views.observations, index, observation)
            views.terminations[index] = False
            views.truncations[index] = False
            self.ended[offset] = False
            self.sent_infos[offset] = dict(info)
            infos.append((index, info))
        return infos

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        results = []
        for env in self.envs:
            function = env.get_wrapper_attr(name)
            results.append(function(*args, **kwargs) if callable(function) else function)
        return results

    def set_attr(self, name: str, values: Sequence[Any]) -> list[Any]:
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)
        return []

    def close(self) -> None:
        """Close every env, even when one's close() raises (the first error is raised after)."""
        errors = []
        for env in self.envs:
            try:
                env.close()
            except Exception as error:
                errors.append(error)
        if errors:
            raise errors[0]


def spaces_unlike(envs: Sequence[gym.Env], first: int, spaces: tuple[gym.Space, gym.Space]) -> str:
    """Which of these envs (numbered from `first`) has other spaces than the first env's, and
    how; "" if none: one vector env's shared buffers hold one layout for all."""
    for index, env in enumerate(envs, start=first):
        for name, made, expected in zip(
            ("observation_space", "action_space"),
            (env.observation_space, env.action_space),
            spaces,
            strict=True,
        ):
            if made != expected:
                return (
                    f"env {index} has the {name} {made}, unlike env 0's {expected}: the envs of "
                    "one vector env must have the same spaces"
                )
    return ""


def run_worker(
    env_fns: list[CloudpickleWrapper],
    first: int,
    conn: Connection,
    parent_ends: list[Connection],
    buffers: SharedBuffers,
    spaces: tuple[gym.Space, gym.Space],
    autoreset_mode: AutoresetMode,
) -> None:
    """A worker process: make its envs, then serve the parent's requests until close or EOF.

    Ctrl-C is left to the parent, which closes the workers; the parent's pipe ends are closed
    here so that the worker sees EOF, and ends, if the parent dies.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for end in parent_ends:
        end.close()
    try:
        envs = [fn() for fn in env_fns]
        unlike = spaces_unlike(envs, first, spaces)
        views = buffers.views(*spaces, len(buffers.rewards))
    except Exception as error:
        conn.send_bytes(_error_reply(error))
        return
    conn.send_bytes(pickle.dumps(("ok", unlike)))
    envs_slice = EnvSlice(envs, first, views, autoreset_mode)
    handlers = {"reset": envs_slice.reset, "call": envs_slice.call, "set_attr": envs_slice.set_attr}
    while True:
        try:
            message = receive(conn)
        except (EOFError, OSError):
            break
        try:
            if message == STEP:
                changes = envs_slice.step()
                reply = pickle.dumps(("ok", changes)) if changes else NO_INFO_CHANGE
            else:
                command, data = pickle.loads(message)
                if command == "close":
                    break
                reply = pickle.dumps(("ok", handlers[command](*data)))
        except Exception as error:
            envs_slice.sent_infos = [None] * len(envs)
            reply = _error_reply(error)
        try:
            conn.send_bytes(reply)
        except OSError:
            break
    envs_slice.close()
    conn.close()


def _error_reply(error: Exception) -> bytes:
    """The error reply: the exception if it survives a pickle round trip (else None) and its
    formatted traceback.

    The round trip is tried here because an exception can pickle but not unpickle (a class whose
    `__init__` takes other arguments than its message): the parent would then lose the worker's
    traceback to an unpickling TypeError of its own.
    """
    trace = traceback.format_exc()
    try:
        reply = pickle.dumps(("error", (error, trace)))
        pickle.loads(reply)
        return reply
    except Exception:
        return pickle.dumps(("error", (None, trace)))
