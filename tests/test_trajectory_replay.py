"""A recorded trajectory replays bit for bit: speed work on the env must not change what it returns.

tests/data/trajectory_skills.npz holds, for each skill's env (Reach-v0 to Tower-v0), a seeded
reset, one episode of the scripted expert with action noise (so success, termination and every
shaping stage occur), a reset without seed, then uniform random actions. The actions are stored,
so the replay depends on the env alone. The reward mode does not change the motion, so the file
keeps one copy of the observations, flags and instructions per env, and the rewards of both
modes. Regenerate it (only for an intended change of behaviour) with
`MUJOCO_GL=egl python tests/test_trajectory_replay.py`.

Bitwise equality holds on one platform: another MuJoCo or NumPy version, or a CPU for which
NumPy's BLAS picks other kernels for the controller's small matrix products (OpenBLAS's AVX-512
kernels round them differently from its AVX2 ones), gives a different trajectory. The file names
the versions it was recorded with and a fingerprint of how its machine's BLAS rounds those
products. Where the fingerprint differs (an AVX-512 CPU), the replay runs in a subprocess with the
recording's kernels forced (RECORDING_KERNELS), so it is checked there too; it is skipped where the
forced kernels still round otherwise. The file also lists the versions it replays under bit for
bit (those it was recorded with, then any vouched for by `python tests/test_trajectory_replay.py
--vouch`, which replays it and adds this process's versions only if every case is identical:
MuJoCo 4.0.1 replays the 4.0.0 recording so). Under versions it does not list, the replay is
checked all the same and skipped, naming the first difference, only where it differs; on such a
machine, regenerate the file from the code before a change, then test after.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np
import pytest

import gameon.envs  # noqa: F401  (registers the GameOn/ ids)
from gameon.atomic import atomic_file
from gameon.envs.experts import make_expert
from gameon.integrity import numpy_blas_fingerprint

DATA = Path(__file__).parent / "data" / "trajectory_skills.npz"
CASES = {
    "reach": ("GameOn/Reach-v0", 100),
    "lift": ("GameOn/Lift-v0", 120),
    "push": ("GameOn/Push-v0", 150),
    "place": ("GameOn/Place-v0", 150),
    "stack": ("GameOn/Stack-v0", 150),
    "unstack": ("GameOn/Unstack-v0", 150),
    "tower": ("GameOn/Tower-v0", 250),
}
"""Name: env id and env steps, one case per skill (the Tower expert needs 210 at this seed)."""
REWARD_MODES = ("sparse", "dense")
SEED = 7
EXPERT_NOISE = 0.1
INFO_FLAGS = ("success", "is_success", "sim_unstable")
OBS_KEYS = ("state", "goal")
RECORDING_KERNELS = {"OPENBLAS_CORETYPE": "Haswell"}
"""OpenBLAS's AVX2 kernels, with which the file was recorded: forced in a subprocess where this
process's BLAS rounds otherwise (OpenBLAS reads the variable only as numpy loads it)."""


def _empty_log() -> dict[str, list]:
    fields = ("is_reset", "reward", "terminated", "truncated", "instruction", *INFO_FLAGS)
    return {name: [] for name in (*fields, *OBS_KEYS)}


def _log(log: dict[str, list], observation: dict, info: dict, step: tuple | None) -> None:
    """Append one reset (step None) or one step's (reward, terminated, truncated) to the log."""
    reward, terminated, truncated = step if step is not None else (0.0, False, False)
    log["is_reset"].append(step is None)
    log["reward"].append(reward)
    log["terminated"].append(terminated)
    log["truncated"].append(truncated)
    log["instruction"].append(info["instruction"])
    for flag in INFO_FLAGS:
        log[flag].append(info[flag])
    for key in OBS_KEYS:
        log[key].append(observation[key].copy())


def _as_arrays(log: dict[str, list]) -> dict[str, np.ndarray]:
    arrays = {name: np.array(values) for name, values in log.items()}
    arrays["reward"] = arrays["reward"].astype(np.float64)
    return arrays


def record(env_id: str, steps: int) -> dict[str, np.ndarray]:
    """Run the expert episode then random actions; return the actions and all the env returned."""
    env = gym.make(env_id, reward_mode=REWARD_MODES[0])
    random_actions = np.random.default_rng(SEED).uniform(-1.0, 1.0, (steps, 5)).astype(np.float32)
    log = _empty_log()
    actions = []
    observation, info = env.reset(seed=SEED)
    _log(log, observation, info, None)
    expert = make_expert(env, EXPERT_NOISE, seed=SEED)
    expert.reset()
    expert_episode = True
    for t in range(steps):
        action = expert.act(observation) if expert_episode else random_actions[t]
        actions.append(action)
        observation, reward, terminated, truncated, info = env.step(action)
        _log(log, observation, info, (reward, terminated, truncated))
        if terminated or truncated:
            expert_episode = False
            observation, info = env.reset()
            _log(log, observation, info, None)
    env.close()
    return {"action": np.array(actions), **_as_arrays(log)}


def replay(env_id: str, reward_mode: str, actions: np.ndarray) -> dict[str, np.ndarray]:
    """Feed recorded actions to a fresh env (same seed, same resets); return what it returned."""
    env = gym.make(env_id, reward_mode=reward_mode)
    log = _empty_log()
    observation, info = env.reset(seed=SEED)
    _log(log, observation, info, None)
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        _log(log, observation, info, (reward, terminated, truncated))
        if terminated or truncated:
            observation, info = env.reset()
            _log(log, observation, info, None)
    env.close()
    return _as_arrays(log)


def versions() -> str:
    """The library versions of this process, as a recording lists those it replays under."""
    return f"mujoco {mujoco.__version__}, numpy {np.__version__}"


def listed_versions(recording: dict[str, np.ndarray]) -> list[str]:
    """The versions the recording replays under bit for bit (one string in older files)."""
    return np.atleast_1d(recording["versions"]).astype(str).tolist()


def regenerate(path: Path = DATA) -> None:
    """Record every case with the current env and write them to `path`."""
    arrays = {"versions": np.array([versions()]), "blas": np.array(numpy_blas_fingerprint())}
    for name, (env_id, steps) in CASES.items():
        recording = record(env_id, steps)
        for mode in REWARD_MODES:
            replayed = replay(env_id, mode, recording["action"])
            for field, values in replayed.items():
                if field != "reward" and values.tobytes() != recording[field].tobytes():
                    raise RuntimeError(f"{name}: {field} depends on the reward mode")
            arrays[f"{name}__reward_{mode}"] = replayed.pop("reward")
        recording.pop("reward")
        arrays.update({f"{name}__{field}": values for field, values in recording.items()})
    with atomic_file(path) as partial:
        np.savez_compressed(partial, **arrays)


def replay_all(path: Path) -> None:
    """Replay every case of the recording in both reward modes; write the results to `path`
    with this process's BLAS fingerprint."""
    with np.load(DATA) as data:
        actions = {name: data[f"{name}__action"] for name in CASES}
    arrays = {"blas": np.array(numpy_blas_fingerprint())}
    for name, (env_id, _) in CASES.items():
        for mode in REWARD_MODES:
            for field, values in replay(env_id, mode, actions[name]).items():
                arrays[f"{name}__{mode}__{field}"] = values
    np.savez(path, **arrays)


@pytest.fixture(scope="module")
def recorded() -> dict[str, np.ndarray]:
    with np.load(DATA) as data:
        return dict(data)


@pytest.fixture(scope="module")
def replayed_with_recording_kernels(recorded, tmp_path_factory) -> dict[str, np.ndarray]:
    """Every case's replay, run in a subprocess with RECORDING_KERNELS forced; skips the test
    where that cannot give the recording's rounding (not x86-64, the variable already set, a CPU
    without those kernels, or a fingerprint that still differs)."""
    forced = [name for name in RECORDING_KERNELS if name in os.environ]
    if platform.machine().lower() not in ("x86_64", "amd64") or forced:
        pytest.skip(
            "this machine's BLAS rounds the controller's matrix products differently from the "
            f"recording machine's, and {'the set ' + forced[0] if forced else 'this CPU'} "
            "rules out forcing the recording's kernels"
        )
    path = tmp_path_factory.mktemp("replay") / "replayed.npz"
    done = subprocess.run(
        [sys.executable, __file__, "--replay", str(path)],
        env={**os.environ, **RECORDING_KERNELS},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"the replay with {RECORDING_KERNELS} failed: {done.stderr[-500:]}")
    with np.load(path) as data:
        replayed = dict(data)
    if str(replayed["blas"]) != str(recorded["blas"]):
        pytest.skip(
            f"even with {RECORDING_KERNELS} this machine's BLAS rounds the controller's products "
            f"differently (fingerprint {replayed['blas']}, recorded {recorded['blas']})"
        )
    return replayed


def test_the_recording_covers_success_termination_resets_and_random_steps(recorded):
    for name, (_, steps) in CASES.items():
        terminated = recorded[f"{name}__terminated"]
        assert recorded[f"{name}__success"].any(), name
        assert terminated.any(), name
        assert np.flatnonzero(terminated)[0] < steps - 20, f"{name}: too few random steps"
        assert recorded[f"{name}__is_reset"].sum() >= 2, name
    dense = recorded["tower__reward_dense"]
    assert len(np.unique(dense)) > 100, "dense rewards should vary along the expert's episode"


@pytest.mark.parametrize("reward_mode", REWARD_MODES)
@pytest.mark.parametrize("name", CASES)
def test_recorded_trajectory_replays_bitwise(request, recorded, name, reward_mode):
    env_id, _ = CASES[name]
    if str(recorded["blas"]) == numpy_blas_fingerprint():
        replayed = replay(env_id, reward_mode, recorded[f"{name}__action"])
    else:
        elsewhere = request.getfixturevalue("replayed_with_recording_kernels")
        prefix = f"{name}__{reward_mode}__"
        replayed = {k.removeprefix(prefix): v for k, v in elsewhere.items() if k.startswith(prefix)}
    replayed[f"reward_{reward_mode}"] = replayed.pop("reward")
    difference = first_difference(replayed, recorded, name)
    if difference and versions() not in listed_versions(recorded):
        pytest.skip(
            f"replays bit for bit under {'; '.join(listed_versions(recorded))}, running under "
            f"{versions()}, which replays it otherwise ({difference}): regenerate it from the "
            "code before a change"
        )
    assert difference is None, f"{name}: {difference}"


def first_difference(replayed: dict[str, np.ndarray], recorded: dict, name: str) -> str | None:
    """Where the replay first departs from the recording of case `name`, or None if it matches
    bit for bit."""
    for field, values in replayed.items():
        expected = recorded[f"{name}__{field}"]
        if values.dtype != expected.dtype or values.shape != expected.shape:
            recorded_as = f"{expected.dtype} {expected.shape}"
            return f"{field} is {values.dtype} {values.shape}, recorded as {recorded_as}"
        if values.tobytes() != expected.tobytes():
            unequal = _byte_rows(values) != _byte_rows(expected)
            step = int(np.flatnonzero(unequal.any(axis=1))[0])
            return f"{field} differs from the recording first at step {step}"
    return None


def _byte_rows(values: np.ndarray) -> np.ndarray:
    """Each step's entry as its bytes (NaN equals NaN there, as in the bitwise comparison)."""
    return np.ascontiguousarray(values).view(np.uint8).reshape(len(values), -1)


def vouch(path: Path = DATA) -> str:
    """Replay every case here; if all are identical, add this process's versions to the file's
    list. Needs the recording's BLAS rounding (on an AVX-512 CPU: OPENBLAS_CORETYPE=Haswell)."""
    with np.load(path) as data:
        recording = dict(data)
    if str(recording["blas"]) != numpy_blas_fingerprint():
        sys.exit(f"this BLAS rounds otherwise: run again with {RECORDING_KERNELS} set")
    for name, (env_id, _) in CASES.items():
        for mode in REWARD_MODES:
            replayed = replay(env_id, mode, recording[f"{name}__action"])
            replayed[f"reward_{mode}"] = replayed.pop("reward")
            difference = first_difference(replayed, recording, name)
            if difference:
                sys.exit(f"not vouched: {name} ({mode}): {difference}")
    listed = listed_versions(recording)
    recording["versions"] = np.array(listed + [versions()] * (versions() not in listed))
    with atomic_file(path) as partial:
        np.savez_compressed(partial, **recording)
    return "; ".join(listed_versions(recording))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--replay"]:
        replay_all(Path(sys.argv[2]))
        sys.exit()
    if sys.argv[1:] == ["--vouch"]:
        print(f"{DATA} replays bit for bit under: {vouch()}")
        sys.exit()
    regenerate()
    print(f"wrote {DATA} ({DATA.stat().st_size / 1024:.0f} KiB)")
