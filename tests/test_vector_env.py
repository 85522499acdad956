"""The shared-memory vector env: SyncVectorEnv's results bit for bit, clean close, clear failures.

The benchmark (deselected by default) compares steps/s with one env and gymnasium's vector envs:
    MUJOCO_GL=egl python -m pytest -m benchmark -s tests/test_vector_env.py
or  MUJOCO_GL=egl python tests/test_vector_env.py   (the table plus the 8 and 16 env figures)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import multiprocessing as mp
import os
import pickle
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError
from gymnasium.vector import AutoresetMode
from timing import machine

from gameon.envs import TargetRelative
from gameon.envs.vector import SharedMemoryVectorEnv, WorkerError, make_vec
from gameon.experimenter.curriculum import FixedCurriculum, task_set
from gameon.experimenter.curriculum_wrapper import CurriculumVectorWrapper

ENV_ID = "GameOn/MultiSkill-v0"
ENV_KWARGS = {"max_episode_steps": 25, "reward_mode": "dense"}
"""Short episodes, so that a few hundred steps cross many autoresets."""
STEPS = 300


def random_actions(steps: int, num_envs: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (steps, num_envs, 5)).astype(np.float32)


def assert_same(actual: Any, expected: Any, where: str = "") -> None:
    """Equal bit for bit: same nesting, keys, types, dtypes, shapes and bytes."""
    assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys(), (
            f"{where}: keys {actual.keys()} != {expected.keys()}"
        )
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), where
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{where}[{index}]")
    elif isinstance(expected, np.ndarray) and expected.dtype == object:
        assert actual.shape == expected.shape, where
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{where}[{index}]")
    elif isinstance(expected, np.ndarray):
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), where
        assert actual.tobytes() == expected.tobytes(), f"{where}: {actual} != {expected}"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


@contextlib.contextmanager
def closing(*envs: gym.vector.VectorEnv) -> Iterator[None]:
    try:
        yield
    finally:
        for env in envs:
            env.close()


class InfoExtras(gym.Wrapper):
    """Adds infos of other kinds than the env's: the action (an array that alone changes from
    step to step), a key of reset infos only, and a nested dict on every 7th step only."""

    def reset(self, **kwargs: Any) -> Any:
        self.steps = 0
        observation, info = self.env.reset(**kwargs)
        return observation, {**info, "episode_start": True}

    def step(self, action: Any) -> Any:
        self.steps += 1
        observation, reward, terminated, truncated, info = self.env.step(action)
        extras: dict[str, Any] = {"action": np.asarray(action, np.float64)}
        if self.steps % 7 == 0:
            extras["seventh"] = {"steps": self.steps}
        return observation, reward, terminated, truncated, {**info, **extras}


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("wrappers", [(), (InfoExtras,)], ids=["env infos", "extra infos"])
def test_three_envs_in_two_workers_step_bit_for_bit_like_sync_vector_env(mode, wrappers) -> None:
    vector_kwargs = {"autoreset_mode": mode}
    sync = gym.make_vec(
        ENV_ID,
        3,
        vectorization_mode="sync",
        vector_kwargs=vector_kwargs,
        wrappers=wrappers,
        **ENV_KWARGS,
    )
    shared = make_vec(
        ENV_ID, 3, workers=2, vector_kwargs=vector_kwargs, wrappers=wrappers, **ENV_KWARGS
    )
    with closing(sync, shared):
        assert shared.metadata["autoreset_mode"] == mode
        assert_same(shared.reset(seed=7), sync.reset(seed=7), "reset")
        ended = 0
        for step, action in enumerate(random_actions(STEPS, 3)):
            if step == 100:
                text = "pick up the red block"
                assert_same(
                    shared.call("set_instruction", text), sync.call("set_instruction", text)
                )
            if step == 200:
                seeds = [None, 3, 4]
                options = {"reset_mask": np.array([False, True, True]), "instruction": text}
                assert_same(
                    shared.reset(seed=seeds, options=dict(options)),
                    sync.reset(seed=seeds, options=dict(options)),
                    "masked reset",
                )
            expected = sync.step(action)
            assert_same(shared.step(action), expected, f"step {step}")
            ended += int(np.sum(expected[2] | expected[3]))
        assert ended >= 3 * (STEPS // 30), "episodes of 25 steps end and autoreset"
        assert shared.get_attr("reward_mode") == ("dense",) * 3


def test_curriculum_wrapper_over_it_runs_as_over_sync_vector_env() -> None:
    """The learners' path: autoreset DISABLED, masked resets with the curriculum's instructions."""
    vector_kwargs = {"autoreset_mode": AutoresetMode.DISABLED}
    tasks = task_set(ENV_ID)
    sync = CurriculumVectorWrapper(
        gym.make_vec(
            ENV_ID, 3, vectorization_mode="sync", vector_kwargs=vector_kwargs, **ENV_KWARGS
        ),
        FixedCurriculum(tasks, seed=1),
    )
    shared = CurriculumVectorWrapper(
        make_vec(ENV_ID, 3, workers=2, vector_kwargs=vector_kwargs, **ENV_KWARGS),
        FixedCurriculum(tasks, seed=1),
    )
    with closing(sync, shared):
        assert_same(shared.reset(seed=0), sync.reset(seed=0), "reset")
        for step, action in enumerate(random_actions(STEPS // 2, 3, seed=1)):
            assert_same(shared.step(action), sync.step(action), f"step {step}")
        assert shared.curriculum.rng.integers(1 << 30) == sync.curriculum.rng.integers(1 << 30)


def test_disabled_autoreset_refuses_to_step_an_ended_env() -> None:
    vector_kwargs = {"autoreset_mode": AutoresetMode.DISABLED, "context": "fork"}
    envs = make_vec(ENV_ID, 2, max_episode_steps=1, vector_kwargs=vector_kwargs)
    with closing(envs):
        envs.reset(seed=0)
        _, _, _, truncated, _ = envs.step(np.zeros((2, 5), np.float32))
        assert truncated.all()
        with pytest.raises(RuntimeError, match=r"sub-envs \[0, 1\] have ended"):
            envs.step(np.zeros((2, 5), np.float32))
        envs.reset(options={"reset_mask": np.array([True, True])})
        envs.step(np.zeros((2, 5), np.float32))


def shm_files_held(pid: int) -> set[str]:
    """Files in /dev/shm that a process has open or mapped and that still have a name there."""
    held = set()
    with contextlib.suppress(FileNotFoundError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        with open(f"/proc/{pid}/maps") as maps:
            held.update(line.split(maxsplit=5)[-1].strip() for line in maps)
    return {path for path in held if path.startswith("/dev/shm/") and "(deleted)" not in path}


def test_close_ends_the_workers_and_leaves_nothing_in_dev_shm() -> None:
    before = set(os.listdir("/dev/shm"))
    envs = make_vec(ENV_ID, 3, workers=2)
    pids = [worker.process.pid for worker in envs.workers]
    envs.reset(seed=0)
    envs.step(random_actions(1, 3)[0])
    for pid in [os.getpid(), *pids]:
        assert shm_files_held(pid) == set(), "shared memory must be unlinked from /dev/shm"
    envs.close()
    assert not any(child.pid in pids for child in mp.active_children())
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}/status"), f"worker {pid} outlived close()"
    ours = [name for name in set(os.listdir("/dev/shm")) - before if str(os.getpid()) in name]
    assert ours == []
    with pytest.raises(ClosedEnvironmentError):
        envs.step(random_actions(1, 3)[0])


def test_a_with_block_ends_the_workers_even_when_it_raises() -> None:
    with pytest.raises(KeyError), make_vec(ENV_ID, 2, workers=2) as envs:
        envs.reset(seed=0)
        pids = [worker.process.pid for worker in envs.workers]
        raise KeyError("the experiment's own bug")
    assert envs.closed
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}/status"), f"worker {pid} outlived the with block"


class ExitOnStep(gym.Wrapper):
    """Ends its process at once, as a crash in native code would, on its `at`-th step."""

    def __init__(self, env: gym.Env, at: int) -> None:
        super().__init__(env)
        self.at, self.steps = at, 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == self.at:
            os._exit(3)
        return self.env.step(action)


def make_env(crash_at: int | None = None) -> gym.Env:
    env = gym.make(ENV_ID, **ENV_KWARGS)
    return env if crash_at is None else ExitOnStep(env, crash_at)


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fail, rather than hang, when the block takes longer than `seconds`."""

    def expire(*_: Any) -> None:
        raise TimeoutError(f"still waiting after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_worker_that_dies_raises_a_clear_error_and_closes_the_env() -> None:
    env_fns = [make_env, make_env, functools.partial(make_env, crash_at=5)]
    with time_limit(60):
        envs = SharedMemoryVectorEnv(env_fns, workers=2)
        pids = [worker.process.pid for worker in envs.workers]
        envs.reset(seed=0)
        with pytest.raises(WorkerError, match=r"envs 2 to 2\) died \(exit code 3\) during step"):
            for action in random_actions(10, 3):
                envs.step(action)
    assert envs.closed
    assert not any(os.path.exists(f"/proc/{pid}/status") for pid in pids)
    with pytest.raises(ClosedEnvironmentError):
        envs.reset()


def test_an_env_exception_is_raised_in_the_parent_and_the_env_stays_usable() -> None:
    envs = make_vec(ENV_ID, 3, workers=2, vector_kwargs={"context": "fork"})
    with closing(envs):
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="unknown reset option") as raised:
            envs.reset(options={"colour": "red"})
        assert isinstance(raised.value.__cause__, WorkerError)
        assert "Traceback" in str(raised.value.__cause__)
        _, infos = envs.reset(seed=0)
        assert infos["_instruction"].all()
        with pytest.raises(ValueError, match=r"actions must have shape \(3, 5\)"):
            envs.step(np.zeros(5, np.float32))


@pytest.mark.parametrize(
    "actions, expected",
    [
        (np.full((3, 5), 0.5 + 2j), "got dtype complex128"),
        (np.full((3, 5), "0.5"), "got dtype <U3"),
        (np.full((3, 5), None), "got dtype object"),
        ([[0.0] * 5, [0.0] * 5, [0.0] * 4], r"actions must have shape \(3, 5\)"),
    ],
    ids=["complex", "text", "object", "ragged"],
)
def test_actions_that_are_not_real_numbers_are_refused_before_any_env_steps(
    actions: Any, expected: str
) -> None:
    """Numpy would cast text and drop imaginary parts on the way into shared memory; the single
    env refuses both, so the vector env does too."""
    with make_vec(ENV_ID, 3, workers=2, vector_kwargs={"context": "fork"}) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=expected):
            envs.step(actions)
        with pytest.raises(ValueError, match="reset options must be a dict"):
            envs.reset(options="reset_mask")
        assert_same(envs.reset(seed=0), envs.reset(seed=0), "reset")


def test_a_finite_action_beyond_float32_is_clipped_as_the_single_env_clips_it() -> None:
    actions = np.full((2, 5), 1e300)
    outcomes = []
    for envs in (
        make_vec(ENV_ID, 2, workers=2, vector_kwargs={"context": "fork"}),
        gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="sync"),
    ):
        with closing(envs):
            envs.reset(seed=0)
            outcomes.append(envs.step(actions))
    assert_same(outcomes[0], outcomes[1], "step")


class TwoArgumentError(Exception):
    """Pickles, but does not unpickle: pickle rebuilds it from its message alone."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


class Faulty(gym.Wrapper):
    """Env `index` of a vector env; env `faulty` raises TwoArgumentError on its `at`-th step and
    returns one from `make_error`, in whichever process it lives."""

    def __init__(self, env: gym.Env, index: int, faulty: int, at: int) -> None:
        super().__init__(env)
        self.index, self.faulty, self.at, self.steps = index, faulty, at, 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.index == self.faulty and self.steps == self.at:
            raise TwoArgumentError(7, "the env's own error")
        return self.env.step(action)

    def make_error(self) -> Any:
        return TwoArgumentError(7, "a result") if self.index == self.faulty else self.index


def make_faulty(index: int, faulty: int, at: int) -> gym.Env:
    return Faulty(gym.make("GameOn/Reach-v0"), index, faulty, at)


def faulty_envs(num_envs: int, faulty: int, at: int = 2) -> SharedMemoryVectorEnv:
    """One env per worker, forked so that TwoArgumentError is this module's class everywhere."""
    env_fns = [functools.partial(make_faulty, i, faulty, at) for i in range(num_envs)]
    return SharedMemoryVectorEnv(env_fns, workers=num_envs, context="fork")


def test_a_worker_exception_that_does_not_unpickle_keeps_its_traceback() -> None:
    """The exception pickles in the worker but not in the parent: its traceback still arrives,
    and the last worker's reply is read, not left to answer the next step."""
    envs = faulty_envs(3, faulty=1)
    actions = np.zeros((3, 5), np.float32)
    with closing(envs), time_limit(60):
        envs.reset(seed=0)
        envs.step(actions)
        with pytest.raises(WorkerError, match=r"envs 1 to 1\) raised during step") as raised:
            envs.step(actions)
        assert "TwoArgumentError: 7: the env's own error" in str(raised.value)
        assert envs.get_attr("steps") == (2, 2, 2)


def test_a_reply_that_does_not_unpickle_raises_and_leaves_the_others_read() -> None:
    envs = faulty_envs(3, faulty=1)
    with closing(envs), time_limit(60):
        with pytest.raises(WorkerError, match="could not be unpickled in the parent"):
            envs.call("make_error")
        assert envs.get_attr("index") == (0, 1, 2)


class InterruptedHere(gym.Wrapper):
    """Raises KeyboardInterrupt, as Ctrl-C would, on its `at`-th step in process `pid` only."""

    def __init__(self, env: gym.Env, pid: int, at: int) -> None:
        super().__init__(env)
        self.pid, self.at, self.steps = pid, at, 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if os.getpid() == self.pid and self.steps == self.at:
            raise KeyboardInterrupt
        return self.env.step(action)


def make_interrupted(pid: int, at: int) -> gym.Env:
    return InterruptedHere(gym.make("GameOn/Reach-v0"), pid, at)


@pytest.mark.parametrize("workers", [2, 1])
def test_ctrl_c_in_the_parents_own_envs_closes_the_vector_env(workers: int) -> None:
    """The workers got the step too: their replies, left unread, would answer the next step
    before it was taken, so the vector env closes rather than return stale observations. With
    one worker (the parent alone) the envs before the interrupted one have stepped and those
    after it have not: it closes all the same, rather than go on out of step."""
    make = functools.partial(make_interrupted, pid=os.getpid(), at=2)
    envs = SharedMemoryVectorEnv([make, make], workers=workers, context="fork")
    pids = [worker.process.pid for worker in envs.workers]
    actions = np.zeros((2, 5), np.float32)
    with closing(envs), time_limit(60):
        envs.reset(seed=0)
        envs.step(actions)
        with pytest.raises(KeyboardInterrupt):
            envs.step(actions)
        assert envs.closed
        assert not any(os.path.exists(f"/proc/{pid}/status") for pid in pids)
        with pytest.raises(ClosedEnvironmentError, match="interrupted request"):
            envs.step(actions)


class CloseFails(gym.Wrapper):
    """Its close() raises in process `pid` (after closing its env); counts its closings there."""

    closed = 0

    def __init__(self, env: gym.Env, pid: int) -> None:
        super().__init__(env)
        self.pid = pid

    def close(self) -> None:
        super().close()
        if os.getpid() == self.pid:
            CloseFails.closed += 1
            raise RuntimeError("the env's close failed")


def make_close_fails(pid: int) -> gym.Env:
    return CloseFails(gym.make("GameOn/Reach-v0"), pid)


def test_an_env_whose_close_raises_still_leaves_the_vector_env_closed() -> None:
    make = functools.partial(make_close_fails, pid=os.getpid())
    envs = SharedMemoryVectorEnv([make] * 3, workers=2, context="fork")
    pids = [worker.process.pid for worker in envs.workers]
    with time_limit(60):
        envs.reset(seed=0)
        with pytest.raises(RuntimeError, match="the env's close failed"):
            envs.close()
    assert CloseFails.closed == 2, "both of this process's envs are closed"
    assert envs.closed
    assert not any(os.path.exists(f"/proc/{pid}/status") for pid in pids)
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.zeros((3, 5), np.float32))


class InstructionText(gym.ObservationWrapper):
    """Adds the instruction as text (a Text space, which shared memory cannot hold); records its
    closing."""

    closed = 0

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        text = gym.spaces.Text(200, charset="abcdefghijklmnopqrstuvwxyz ,")
        self.observation_space = gym.spaces.Dict({**env.observation_space.spaces, "text": text})

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        return {**observation, "text": self.get_wrapper_attr("_instruction_text")}

    def close(self) -> None:
        InstructionText.closed += 1
        super().close()


def test_a_space_shared_memory_cannot_hold_is_refused_before_any_worker_starts() -> None:
    children = set(mp.active_children())
    with pytest.raises(
        ValueError,
        match=r"observation_space\['text'\] is Text\(.*vectorization_mode='sync' or 'async'",
    ):
        make_vec("GameOn/Reach-v0", 2, workers=2, wrappers=[InstructionText])
    assert InstructionText.closed == 1, "the env made to read the spaces is closed"
    assert set(mp.active_children()) == children


@pytest.mark.parametrize("workers", [1, 2])
def test_envs_of_other_spaces_are_refused_at_construction_naming_the_env(workers: int) -> None:
    """Only each slice's first env was compared: a 4-block env after a 3-block one in the same
    slice was accepted, then failed at reset with numpy's broadcast error."""
    children = set(mp.active_children())
    three = functools.partial(gym.make, "GameOn/Stack-v0")
    four = functools.partial(gym.make, "GameOn/Stack-v0", blocks=4)
    with pytest.raises(RuntimeError, match=r"env 3 has the observation_space Dict\(.*unlike env "):
        SharedMemoryVectorEnv([three, three, three, four], workers=workers)
    assert set(mp.active_children()) == children


def test_a_script_without_a_main_guard_is_told_why_its_workers_died(tmp_path) -> None:
    script = tmp_path / "no_guard.py"
    script.write_text(
        f"import gameon.envs\nenvs = gameon.envs.make_vec({ENV_ID!r}, 2, workers=2)\nenvs.close()\n"
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 1
    assert "died (exit code 1) during start" in result.stderr
    assert 'needs `if __name__ == "__main__":`' in result.stderr


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy, pickle.dumps], ids=lambda f: f.__name__)
def test_copying_or_pickling_is_refused_saying_how_to_make_the_envs_again(how: Callable) -> None:
    """A shallow copy shared the workers, and ended them when it was garbage collected."""
    with make_vec(ENV_ID, 2, workers=2, vector_kwargs={"context": "fork"}) as envs:
        with pytest.raises(TypeError, match=r"cannot be copied or pickled: its envs live in its"):
            how(envs)
        gc.collect()
        envs.reset(seed=0)
        envs.step(np.zeros((2, 5), np.float32))


def test_a_vectorization_mode_is_refused_pointing_to_gym_make_vec() -> None:
    with pytest.raises(
        ValueError, match=r"takes no vectorization_mode \(got 'sync'\).*gym\.make_vec"
    ):
        make_vec(ENV_ID, 2, vectorization_mode="sync")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"num_envs": 2.0}, r"num_envs must be a whole number >= 1, got 2\.0"),
        ({"num_envs": 0}, "num_envs must be a whole number >= 1, got 0"),
        ({"wrappers": InfoExtras}, r"wrappers must be a list of env wrappers .*got <class"),
        ({"wrappers": [1]}, r"wrappers must be a list of env wrappers .*got \[1\]"),
        ({"workers": "2"}, "workers must be a whole number from 1 to num_envs=2, got '2'"),
        ({"workers": 1.0}, "workers must be a whole number from 1 to num_envs=2, got 1.0"),
        ({"workers": 3}, "workers must be a whole number from 1 to num_envs=2, got 3"),
        # gym.make's own error for it: "'int' object has no attribute 'endswith'".
        (
            {"render_mode": 1},
            r"render_mode must be None or the name of one of the env's render modes "
            r"\(rgb_array, human, rgb_array_list\), got 1",
        ),
    ],
)
def test_bad_make_vec_arguments_say_what_they_must_be(arguments: dict, message: str) -> None:
    children = set(mp.active_children())
    with pytest.raises(ValueError, match=message):
        make_vec(ENV_ID, **{"num_envs": 2, **arguments})
    assert set(mp.active_children()) == children


def test_its_spec_makes_the_same_envs_again() -> None:
    """gym.make's own max_episode_steps goes to the spec's field, not to the env's kwargs (where
    remaking the env from the spec failed), and wrappers that record their arguments are kept."""
    with make_vec(
        "GameOn/Reach-v0",
        2,
        workers=2,
        wrappers=[TargetRelative],
        reward_mode="dense",
        max_episode_steps=3,
    ) as envs:
        spec = envs.spec
        keys = set(envs.single_observation_space.spaces)
    assert spec.max_episode_steps == 3 and spec.kwargs["reward_mode"] == "dense"
    assert "max_episode_steps" not in spec.kwargs
    single = gym.make(spec)
    assert isinstance(single, TargetRelative) and single.spec == spec
    single.close()
    with make_vec(spec, 2, workers=2) as again:
        assert again.spec == spec and set(again.single_observation_space.spaces) == keys
        again.reset(seed=0)
        truncations = [again.step(again.action_space.sample())[3] for _ in range(3)]
    assert [row.tolist() for row in truncations] == [[False, False]] * 2 + [[True, True]]


@pytest.mark.parametrize(
    "seed", [np.int64(3), [np.int64(3), 4, np.uint8(5)], np.arange(3, 6)], ids=repr
)
@pytest.mark.parametrize("env_id", [ENV_ID, "CartPole-v1"])
def test_numpy_integer_seeds_seed_as_the_same_ints_do(env_id: str, seed: Any) -> None:
    """Seeds drawn with np.random or taken from a seed array are NumPy integers; gymnasium's own
    envs take only Python ints."""
    with make_vec(env_id, 3, workers=2, vector_kwargs={"context": "fork"}) as envs:
        expected = envs.reset(seed=3)
        assert_same(envs.reset(seed=seed), expected, "reset")
        assert envs.np_random_seed == (3, 4, 5)


@pytest.mark.parametrize(
    "seed",
    [True, np.bool_(True), 1.0, -1, np.int64(-1), "3", {3, 4}, {0: 3, 1: 4}, np.array(5)],
    ids=repr,
)
def test_one_seed_that_is_not_a_whole_number_from_zero_is_refused_before_any_env_resets(
    seed: Any,
) -> None:
    with make_vec(ENV_ID, 2, workers=2, vector_kwargs={"context": "fork"}) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError) as excinfo:
            envs.reset(seed=seed)
        assert str(excinfo.value) == (
            "seed must be None, a whole number >= 0 (a Python or NumPy integer, not a bool: env i "
            f"gets seed + i) or a list of num_envs=2 such seeds or None, got {seed!r}"
        )
        assert envs.np_random_seed == (0, 1)


class SignedZero(gym.Wrapper):
    """Its info's "delta" is 0.0 after a reset and -0.0 after a step."""

    def reset(self, **kwargs: Any) -> Any:
        observation, info = self.env.reset(**kwargs)
        return observation, {**info, "delta": 0.0}

    def step(self, action: Any) -> Any:
        *result, info = self.env.step(action)
        return (*result, {**info, "delta": -0.0})


def test_an_info_value_that_changes_only_its_sign_of_zero_arrives_as_in_sync() -> None:
    """Infos travel only when changed, and 0.0 == -0.0: the sign was lost."""
    shared = make_vec(
        ENV_ID, 2, workers=2, wrappers=[SignedZero], vector_kwargs={"context": "fork"}
    )
    with closing(shared):
        shared.reset(seed=0)
        delta = shared.step(np.zeros((2, 5), np.float32))[4]["delta"]
    assert np.signbit(delta).all()


def test_after_a_reset_that_fails_in_one_slice_the_infos_are_sync_s() -> None:
    """The slices that did reset report their new episode's info, as SyncVectorEnv does."""
    reach = "GameOn/Reach-v0"
    shared = make_vec(reach, 2, workers=2, vector_kwargs={"context": "fork"})
    sync = gym.make_vec(reach, num_envs=2, vectorization_mode="sync")
    infos = []
    for envs in (shared, sync):
        with closing(envs):
            envs.reset(seed=[0, 1], options={"instruction": "reach the red block"})
            envs.step(np.zeros((2, 5), np.float32))
            with pytest.raises(ValueError, match="seed must be None or a whole number >= 0"):
                envs.reset(seed=[0, -1], options={"instruction": "reach the blue block"})
            infos.append(envs.step(np.zeros((2, 5), np.float32))[-1]["instruction"].tolist())
    assert infos[0] == infos[1]
    assert infos[0][0] == "move the gripper above the blue block"


# -- benchmark ---------------------------------------------------------------------------------

BENCH_ENV_ID = "GameOn/Stack-v0"
REPS = 7
BENCH_ENV_STEPS = 1000
"""Env steps each variant takes per rep (a vector env takes this over num_envs vector steps)."""
MIN_SHARED_SPEEDUP = 1.6
CEILING = "2 plain envs in 2 processes side by side (ceiling)"
"""The variant no 2-env vector env can beat on this machine: two processes that never wait."""


def run_plain_env(env: gym.Env, actions: np.ndarray) -> None:
    """Step one env through `actions`, resetting it when its episode ends."""
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()


def side_by_side_loop(conn: Connection) -> None:
    """A process with one plain env that takes as many steps as it is sent, then answers."""
    env = gym.make(BENCH_ENV_ID)
    env.reset(seed=0)
    while (steps := conn.recv()) is not None:
        run_plain_env(env, random_actions(steps, 1)[:, 0])
        conn.send(True)
    env.close()


class SideBySide:
    """Two processes stepping a plain env each, meeting only at the end of a rep: the ceiling
    that the machine's load leaves to any 2-env vector env."""

    num_envs = 2

    def __init__(self) -> None:
        ctx = mp.get_context("forkserver")
        self.conns, self.processes = [], []
        for _ in range(self.num_envs):
            parent_end, child_end = ctx.Pipe()
            process = ctx.Process(target=side_by_side_loop, args=(child_end,), daemon=True)
            process.start()
            self.conns.append(parent_end)
            self.processes.append(process)

    def reset(self, seed: int | None = None) -> None:
        pass

    def run(self, steps: int) -> None:
        for conn in self.conns:
            conn.send(steps)
        for conn in self.conns:
            conn.recv()

    def close(self) -> None:
        for conn, process in zip(self.conns, self.processes, strict=True):
            conn.send(None)
            process.join()


Bench = gym.Env | gym.vector.VectorEnv | SideBySide

VARIANTS: dict[str, Callable[[], Bench]] = {
    "one env": lambda: gym.make(BENCH_ENV_ID),
    "shared, 2 envs in 2 workers": lambda: make_vec(BENCH_ENV_ID, 2, workers=2),
    "gym sync, 2 envs": lambda: gym.make_vec(BENCH_ENV_ID, 2, vectorization_mode="sync"),
    "gym async, 2 envs": lambda: gym.make_vec(BENCH_ENV_ID, 2, vectorization_mode="async"),
    CEILING: SideBySide,
}
SCALING_VARIANTS: dict[str, Callable[[], Bench]] = {
    "shared, 1 env in 1 worker": lambda: make_vec(BENCH_ENV_ID, 1, workers=1),
    "shared, 8 envs in 2 workers": lambda: make_vec(BENCH_ENV_ID, 8, workers=2),
    "shared, 16 envs in 2 workers": lambda: make_vec(BENCH_ENV_ID, 16, workers=2),
}


def worker_pids(env: Bench) -> list[int]:
    """The processes that step an env or vector env besides this one."""
    if isinstance(env, SharedMemoryVectorEnv):
        return [worker.process.pid for worker in env.workers]
    return [process.pid for process in getattr(env, "processes", [])]


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU time of the processes so far (in clock ticks of 10 ms)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rep(env: Bench, actions: np.ndarray) -> tuple[float, float]:
    """(wall, CPU) seconds of all the env's processes to take `actions` (vector steps, env index
    second)."""
    pids = [os.getpid(), *worker_pids(env)]
    cpu, begin = cpu_seconds(pids), time.perf_counter()
    if isinstance(env, SideBySide):
        env.run(len(actions))
    elif isinstance(env, gym.vector.VectorEnv):
        for action in actions:
            env.step(action)
    else:
        run_plain_env(env, actions[:, 0])
    return time.perf_counter() - begin, cpu_seconds(pids) - cpu


@dataclasses.dataclass
class Figures:
    """One variant's medians over the reps."""

    rate: float
    """env-steps/s"""
    cpu_us: float
    """CPU time of every process involved per env step, in microseconds"""


def measure(variants: dict[str, Callable[[], Bench]], reps: int = REPS) -> dict[str, Figures]:
    """Each variant's figures under random actions; reps go round the variants, so every
    variant sees the same load."""
    envs = {name: make() for name, make in variants.items()}
    actions, reps_of = {}, {name: [] for name in envs}
    try:
        for name, env in envs.items():
            num_envs = getattr(env, "num_envs", 1)
            actions[name] = random_actions(BENCH_ENV_STEPS // num_envs, num_envs)
            env.reset(seed=0)
            rep(env, actions[name][:20])
        for _ in range(reps):
            for name, env in envs.items():
                reps_of[name].append(rep(env, actions[name]))
    finally:
        for env in envs.values():
            env.close()
    figures = {}
    for name, results in reps_of.items():
        env_steps = actions[name].shape[0] * actions[name].shape[1]
        wall, cpu = (statistics.median(values) for values in zip(*results, strict=True))
        figures[name] = Figures(env_steps / wall, cpu / env_steps * 1e6)
    return figures


def table(figures: dict[str, Figures]) -> str:
    """The figures as a Markdown table, each rate also over one env's and over the ceiling's: the
    machine sets the ceiling (two processes that never wait for each other), the code the rest."""
    one, ceiling = figures["one env"].rate, figures[CEILING].rate
    lines = [
        f"Measured on {machine()}",
        "| variant | env-steps/s | x one env | x the ceiling | CPU per env step |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {name} | {f.rate:.0f} | {f.rate / one:.2f} | {f.rate / ceiling:.2f} "
        f"| {f.cpu_us:.0f} us |"
        for name, f in figures.items()
    ]
    return "\n".join(lines)


def loadavg() -> str:
    with open("/proc/loadavg") as file:
        return " ".join(file.read().split()[:3])


@pytest.mark.benchmark
def test_two_envs_in_two_workers_beat_one_env_by_the_target() -> None:
    before = loadavg()
    figures = measure(VARIANTS)
    print(f"\n{table(figures)}\nload average before, after: {before}; {loadavg()}")
    assert (
        figures["shared, 2 envs in 2 workers"].rate >= MIN_SHARED_SPEEDUP * figures["one env"].rate
    )


def step_cpu_seconds(steps: int = 2000) -> np.ndarray:
    """CPU seconds of each of `steps` steps of one env under random actions (resets not counted):
    what each step costs on a free core, whatever else the machine runs."""
    env = gym.make(BENCH_ENV_ID)
    env.reset(seed=0)
    times = []
    for action in random_actions(steps, 1, seed=1)[:, 0]:
        begin = time.thread_time()
        _, _, terminated, truncated, _ = env.step(action)
        times.append(time.thread_time() - begin)
        if terminated or truncated:
            env.reset()
    env.close()
    return np.array(times)


@dataclasses.dataclass
class ProtocolCosts:
    """What a vector step costs besides the env steps, from CartPole (a step of a few us);
    medians over single steps, which load disturbs less than it does means."""

    round_trip: float
    """wall seconds of a vector step with one env in one worker, less a plain CartPole step"""
    per_worker: float
    """the parent's CPU seconds a vector step for each further worker (send, receive, read)"""


def protocol_costs(steps: int = 3000) -> ProtocolCosts:
    envs = {
        "plain": gym.make("CartPole-v1"),
        "one": make_vec("CartPole-v1", 1, workers=1),
        "two": make_vec("CartPole-v1", 2, workers=2),
    }
    walls: dict[str, list[float]] = {name: [] for name in envs}
    cpus: dict[str, list[float]] = {name: [] for name in envs}
    for env in envs.values():
        env.reset(seed=0)
    for name, env in envs.items():
        action = np.zeros(env.num_envs, np.int64) if name != "plain" else 0
        for _ in range(steps):
            wall, cpu = time.perf_counter(), time.thread_time()
            _, _, terminated, truncated, _ = env.step(action)
            walls[name].append(time.perf_counter() - wall)
            cpus[name].append(time.thread_time() - cpu)
            if name == "plain" and (terminated or truncated):
                env.reset()
    for env in envs.values():
        env.close()
    wall = {name: statistics.median(values) for name, values in walls.items()}
    cpu = {name: statistics.median(values) for name, values in cpus.items()}
    return ProtocolCosts(wall["one"] - wall["plain"], cpu["two"] - cpu["one"])


def scaling_estimate(steps: np.ndarray, costs: ProtocolCosts) -> str:
    """Env-steps/s of n envs in w workers on w free cores, on paper from per-step costs.

    A vector step lasts the slowest worker's n/w env steps (drawn from `steps`), plus the
    one-worker round trip, plus the parent's cost for each further worker.
    """
    one = 1.0 / steps.mean()
    draws = np.random.default_rng(0).choice(steps, (2000, 16, 16))
    lines = [
        f"On paper (env step {steps.mean() * 1e6:.0f} us CPU mean, round trip "
        f"{costs.round_trip * 1e6:.0f} us, parent per further worker "
        f"{costs.per_worker * 1e6:.1f} us), w workers on w free cores:",
        "| envs | workers | vector step | env-steps/s | x one env |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n, w in ((2, 2), (8, 2), (16, 2), (8, 8), (16, 8), (16, 16)):
        slowest = draws[:, :w, : n // w].sum(-1).max(-1).mean()
        seconds = slowest + costs.round_trip + (w - 1) * costs.per_worker
        lines.append(
            f"| {n} | {w} | {seconds * 1e6:.0f} us | {n / seconds:.0f} | {n / seconds / one:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    before = loadavg()
    print(table(measure({**VARIANTS, **SCALING_VARIANTS})))
    print(f"\nload average before, after: {before}; {loadavg()}\n")
    print(scaling_estimate(step_cpu_seconds(), protocol_costs()))
