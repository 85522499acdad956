"""The policy format every learner writes and every reader loads: flat observations, a running
normaliser, the goal-conditioned actors (`Actor`, one action per observation; `ChunkedActor`, the
next `chunk_length` actions, acted through `ChunkingPolicy`'s temporal ensemble) and the checkpoint
that turns a saved actor back into a policy callable.

It sits below the learners, the skill library and the harness, so any of them can run any
learner's checkpoint (the experimenter runs them as skills, the audit re-evaluates them).
"""

from __future__ import annotations

import io
import math
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import gameon
from gameon.atomic import atomic_write
from gameon.envs import ENV_IDS
from gameon.envs.language import COLOURS, MAX_TOWER
from gameon.envs.world import PROPRIO_SIZE, state_size
from gameon.envs.wrappers import target_relative
from gameon.evaluation import Policy

CHECKPOINT_FORMAT = "gameon-policy-v3"
"""v2: flat observations end with the instruction's blocks relative to the TCP. v3: adds
`actor_kind` ("mlp" or "chunked") and, for chunked actors, chunk_length, binary_gripper and
ensemble_decay. Both load; v2 checkpoints hold `Actor`s."""
READABLE_FORMATS = ("gameon-policy-v2", CHECKPOINT_FORMAT)


def flat_observation(observation: dict[str, np.ndarray]) -> np.ndarray:
    """`state`, `goal`, then the instruction's blocks relative to the TCP (single or batched).

    The last part saves the network from having to pick the named blocks out of the state by the
    goal's one-hots (a product it learns slowly): for each argument slot of the instruction, the
    named block's position minus the TCP's, zeros for unused slots.
    """
    if "state" not in observation:
        raise ValueError(
            "the baselines learn from state observations; make the env with obs_mode='state' "
            "or 'state+pixels'"
        )
    state, goal = observation["state"], observation["goal"]
    parts = (state, goal, instruction_features(state, goal))
    return np.concatenate(parts, axis=-1).astype(np.float32)


def instruction_features(state: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """(..., MAX_TOWER * 3): each named block's position relative to the TCP, slot by slot: the
    env's `target_relative` observation (gameon.envs.TargetRelative), computed here from `state`
    and `goal` for a scene whose blocks are the first n colours of `language.COLOURS` (the
    default)."""
    return target_relative(state, goal, COLOURS[: blocks_in_state(state.shape[-1])])


def blocks_in_state(size: int) -> int:
    """Number of blocks n of a `state` vector of this length (PROPRIO_SIZE + n (17 + n))."""
    n = round((-17 + math.sqrt(289 + 4 * (size - PROPRIO_SIZE))) / 2)
    if state_size(n) != size:
        raise ValueError(f"a state vector of length {size} fits no scene of 2 to 5 blocks")
    return n


def flat_size(space: gym.spaces.Dict) -> int:
    """Length of flat_observation for an env's (single, unbatched) observation space."""
    return int(space["state"].shape[-1] + space["goal"].shape[-1] + MAX_TOWER * 3)


@dataclass
class Normalizer:
    """Running mean and variance of observations (Welford/Chan batch updates), clipped output."""

    mean: np.ndarray
    var: np.ndarray
    count: float = 1e-4
    clip: float = 10.0

    @classmethod
    def zeros(cls, size: int) -> Normalizer:
        return cls(np.zeros(size, np.float64), np.ones(size, np.float64))

    def update(self, batch: np.ndarray) -> None:
        batch = batch.reshape(-1, self.mean.shape[0])
        batch_mean, batch_var, n = batch.mean(0), batch.var(0), batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * n / total
        self.var = (
            self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        ) / total
        self.count = total

    def __call__(self, x: np.ndarray) -> np.ndarray:
        scaled = (x - self.mean) / np.sqrt(self.var + 1e-8)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def to_dict(self) -> dict:
        return {"mean": self.mean, "var": self.var, "count": self.count, "clip": self.clip}


class Actor(nn.Module):
    """MLP from the flat (normalised) observation to the mean action; tanh-squashed if asked."""

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden: tuple[int, ...] = (256, 256),
        squash: bool = True,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = obs_size
        for width in hidden:
            layers += [nn.Linear(size, width), nn.Tanh()]
            size = width
        layers.append(nn.Linear(size, action_size))
        self.net = nn.Sequential(*layers)
        self.obs_size, self.action_size = obs_size, action_size
        self.hidden, self.squash = tuple(hidden), squash

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean = self.net(obs)
        return torch.tanh(mean) if self.squash else mean


class ChunkedActor(nn.Module):
    """MLP from the flat (normalised) observation to the next `chunk_length` actions (ACT's action
    chunks, Zhao et al. 2023), acted through `ChunkingPolicy`'s temporal ensemble.

    `forward` gives (..., chunk_length, action_size): the continuous dims (all but the last: vx,
    vy, vz, yaw) tanh-squashed; the last, the gripper (-1 open, +1 closed), a logit of "closed" if
    `binary_gripper`, else tanh-squashed like the rest. With chunk_length=1 and
    binary_gripper=False it is `Actor(squash=True)` with a chunk axis of length 1 (same layers,
    same state_dict keys). `ensemble_decay` is not trained: it travels with the actor (and its
    checkpoint) so that `make_policy(actor, normalizer)` knows how to ensemble.
    """

    squash = True

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden: tuple[int, ...] = (256, 256),
        chunk_length: int = 8,
        binary_gripper: bool = True,
        ensemble_decay: float = 0.0,
    ) -> None:
        super().__init__()
        if chunk_length < 1:
            raise ValueError(f"chunk_length must be >= 1, got {chunk_length}")
        layers: list[nn.Module] = []
        size = obs_size
        for width in hidden:
            layers += [nn.Linear(size, width), nn.Tanh()]
            size = width
        layers.append(nn.Linear(size, chunk_length * action_size))
        self.net = nn.Sequential(*layers)
        self.obs_size, self.action_size = obs_size, action_size
        self.hidden, self.chunk_length = tuple(hidden), chunk_length
        self.binary_gripper, self.ensemble_decay = binary_gripper, float(ensemble_decay)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(obs).unflatten(-1, (self.chunk_length, self.action_size))
        if not self.binary_gripper:
            return torch.tanh(out)
        return torch.cat((torch.tanh(out[..., :-1]), out[..., -1:]), dim=-1)


def _policy_input(observation: dict[str, np.ndarray], obs_size: int) -> np.ndarray:
    """The flat observation a policy reads, or a ValueError if the env's scene is not the one the
    policy was trained in (its state has another number of blocks)."""
    x = flat_observation(observation)
    if x.shape[-1] != obs_size:
        trained = obs_size - (x.shape[-1] - observation["state"].shape[-1])
        raise ValueError(
            f"this policy was trained on a state of {trained} numbers "
            f"({_blocks_text(trained)}); this env's state has {observation['state'].shape[-1]} "
            f"({_blocks_text(observation['state'].shape[-1])}): act in an env with the blocks "
            "of the one it was trained in"
        )
    return x


def _blocks_text(state_length: int) -> str:
    try:
        return f"a scene of {blocks_in_state(state_length)} blocks"
    except ValueError:
        return "no scene of 2 to 5 blocks"


class ActorPolicy:
    """An `Actor`'s deterministic `observation -> action` (single or batched observations), with
    torch on the live actor; `reset()` does nothing (it has no memory)."""

    def __init__(self, actor: Actor, normalizer: Normalizer | None) -> None:
        self.actor, self.normalizer = actor, normalizer

    def reset(self) -> None:
        """Nothing to clear."""

    def __call__(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        x = _policy_input(observation, self.actor.obs_size)
        if self.normalizer is not None:
            x = self.normalizer(x)
        with torch.no_grad():
            action = self.actor(torch.as_tensor(x)).numpy()
        return np.clip(action, -1.0, 1.0)


class ChunkingPolicy:
    """Acts a `ChunkedActor` with ACT's temporal ensembling, on single (unbatched) observations.

    Every step queries the network for a chunk of the next `chunk_length` actions and keeps the
    last `chunk_length` chunks; the action is the weighted average of every kept chunk's
    prediction for the current step, with weights exp(-ensemble_decay * i), i = 0 for the oldest
    prediction, 1 for the next... (as ACT indexes them): a positive decay favours older
    predictions (ACT uses 0.01), a negative one the newest, 0 weighs all equally. The gripper
    ensembles the probabilities of "closed" and acts +1 (closed) above 0.5, else -1.

    `reset()` clears the kept chunks: call it at the start of every episode (`evaluate` does). A
    change of the observation's goal clears them too, so a policy reused across the skills of one
    episode never mixes chunks of two instructions. The forward pass is a NumPy snapshot of the
    actor's weights at construction (about 10-20 us a step on one core).
    """

    def __init__(
        self,
        actor: ChunkedActor,
        normalizer: Normalizer | None,
        ensemble_decay: float | None = None,
    ) -> None:
        self.normalizer = normalizer
        self.obs_size = actor.obs_size
        self.chunk_length, self.action_size = actor.chunk_length, actor.action_size
        self.binary_gripper = actor.binary_gripper
        self.ensemble_decay = actor.ensemble_decay if ensemble_decay is None else ensemble_decay
        self._layers = [
            (m.weight.detach().cpu().numpy().T.copy(), m.bias.detach().cpu().numpy().copy())
            for m in actor.net
            if isinstance(m, nn.Linear)
        ]
        weights = np.exp(-self.ensemble_decay * np.arange(self.chunk_length))
        # with n chunks kept: the normalised weights and each chunk's age, oldest first
        self._weights = [weights[:n] / weights[:n].sum() for n in range(self.chunk_length + 1)]
        self._ages = [np.arange(n - 1, -1, -1) for n in range(self.chunk_length + 1)]
        self._chunks = np.zeros((self.chunk_length, self.chunk_length, self.action_size))
        self._count, self._goal = 0, None

    def reset(self) -> None:
        """Forget the kept chunks (the next step acts on its own chunk alone)."""
        self._count, self._goal = 0, None

    def chunk(self, x: np.ndarray) -> np.ndarray:
        """(chunk_length, action_size) predictions from one normalised flat observation: the
        continuous dims in [-1, 1], the gripper as the probability of "closed" if binary."""
        for weight, bias in self._layers[:-1]:
            x = np.tanh(x @ weight + bias)
        weight, bias = self._layers[-1]
        out = (x @ weight + bias).reshape(self.chunk_length, self.action_size)
        if not self.binary_gripper:
            return np.tanh(out)
        out[:, :-1] = np.tanh(out[:, :-1])
        out[:, -1] = 0.5 + 0.5 * np.tanh(0.5 * out[:, -1])  # the sigmoid, without overflow
        return out

    def __call__(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        goal = observation["goal"]
        if goal.ndim != 1:
            raise ValueError("a ChunkingPolicy acts on one (unbatched) observation at a time")
        if self._goal is not None and not np.array_equal(goal, self._goal):
            self.reset()
        self._goal = goal.copy()
        x = _policy_input(observation, self.obs_size)
        if self.normalizer is not None:
            x = self.normalizer(x)
        length = self.chunk_length
        self._chunks[self._count % length] = self.chunk(x)
        self._count += 1
        n = min(self._count, length)
        ages = self._ages[n]  # the oldest kept chunk first: it was predicted ages[0] steps ago
        predictions = self._chunks[(self._count - 1 - ages) % length, ages]
        action = self._weights[n] @ predictions
        if self.binary_gripper:
            action[-1] = 1.0 if action[-1] > 0.5 else -1.0
        return np.clip(action, -1.0, 1.0).astype(np.float32)


def save_checkpoint(
    path: str | Path,
    algo: str,
    env_id: str,
    actor: Actor | ChunkedActor,
    normalizer: Normalizer | None,
    args: dict,
    extra: dict | None = None,
) -> Path:
    """Write the actor, its normaliser and the run's arguments to `path`, atomically and durably
    (`gameon.atomic.atomic_write`): an interruption leaves the earlier file, if any, and no
    half-written one beside it."""
    path = Path(path)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "algo": algo,
        "env_id": env_id,
        "gameon_version": gameon.__version__,
        "obs_size": actor.obs_size,
        "action_size": actor.action_size,
        "hidden": list(actor.hidden),
        "squash": actor.squash,
        "actor_kind": "chunked" if isinstance(actor, ChunkedActor) else "mlp",
        "actor": actor.state_dict(),
        "normalizer": None if normalizer is None else normalizer.to_dict(),
        "args": args,
        "extra": extra or {},
    }
    if isinstance(actor, ChunkedActor):
        payload["chunk_length"] = actor.chunk_length
        payload["binary_gripper"] = actor.binary_gripper
        payload["ensemble_decay"] = actor.ensemble_decay
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return atomic_write(path, buffer.getvalue())


def load_checkpoint(path: str | Path) -> tuple[Actor | ChunkedActor, Normalizer | None, dict]:
    """Read a checkpoint (format v2 or v3); a missing, corrupt or foreign file raises ValueError
    saying which. The actor is a `ChunkedActor` (with its saved ensemble_decay) if it was saved
    as one, else an `Actor`."""
    path = Path(path)
    if path.is_dir():  # a run folder, say: its checkpoint is inside
        inside = path / "checkpoint.pt"
        hint = f"; its run's checkpoint is {inside}" if inside.is_file() else ""
        raise ValueError(f"{path} is a folder, not a checkpoint file{hint}")
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}")
    damaged = _damaged_part(path)
    if damaged is not None:
        raise ValueError(
            f"{path} is damaged: its part {damaged} fails its checksum (torch would load the "
            "changed weights without a word); restore it from a copy or train it again"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, ValueError) as error:
        raise ValueError(f"{path} is not a readable checkpoint ({error})") from None
    found = payload.get("format") if isinstance(payload, dict) else None
    if found not in READABLE_FORMATS:
        readable = " or ".join(READABLE_FORMATS)
        if isinstance(found, str) and found.startswith("gameon-policy-"):
            raise ValueError(f"{path} is a {found} checkpoint; this version reads {readable}")
        raise ValueError(f"{path} is not a GameOn policy checkpoint (format {readable})")
    try:
        return _actor_of(payload, path)
    except KeyError as error:
        raise ValueError(f"{path} is a {found} checkpoint without its {error} entry") from None


def _damaged_part(path: Path) -> str | None:
    """The first part of a checkpoint's zip archive (torch.save's format) whose bytes fail their
    CRC, which torch.load does not check; None if all pass or the file is no zip (torch.load then
    says what it is)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError):
        return None


def _actor_of(payload: dict, path: Path) -> tuple[Actor | ChunkedActor, Normalizer | None, dict]:
    kind = payload.get("actor_kind", "mlp")
    if kind == "chunked":
        actor: Actor | ChunkedActor = ChunkedActor(
            payload["obs_size"],
            payload["action_size"],
            tuple(payload["hidden"]),
            chunk_length=payload["chunk_length"],
            binary_gripper=payload["binary_gripper"],
            ensemble_decay=payload["ensemble_decay"],
        )
    elif kind == "mlp":
        actor = Actor(
            payload["obs_size"], payload["action_size"], tuple(payload["hidden"]), payload["squash"]
        )
    else:
        raise ValueError(f"{path}: unknown actor kind {kind!r}")
    try:
        actor.load_state_dict(payload["actor"])
    except RuntimeError as error:
        raise ValueError(f"{path}: actor weights do not match its architecture ({error})") from None
    actor.eval()
    saved = payload["normalizer"]
    try:
        normalizer = None if saved is None else Normalizer(**saved)
    except TypeError as error:  # a hand-edited dict: a field missing or unknown
        raise ValueError(f"{path}: its normalizer is not one ({error})") from None
    return actor, normalizer, payload


def warm_start(actor: nn.Module, path: str | Path) -> Normalizer | None:
    """Copy a checkpoint's actor weights into `actor` (continued training); return the
    checkpoint's normaliser, which the continued run must keep so the weights see the inputs
    they were trained on. A different architecture is a ValueError naming both."""
    saved, normalizer, _ = load_checkpoint(path)
    mine = {k: tuple(v.shape) for k, v in actor.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in saved.state_dict().items()}
    if type(saved) is not type(actor) or mine != theirs:
        raise ValueError(
            f"init checkpoint {path} holds a {type(saved).__name__} {theirs}, which does not "
            f"match this run's {type(actor).__name__} {mine}"
        )
    binary = getattr(saved, "binary_gripper", None), getattr(actor, "binary_gripper", None)
    if binary[0] != binary[1]:
        raise ValueError(
            f"init checkpoint {path} reads its last output as the gripper's "
            f"{_gripper_reading(binary[0])}, this run as its {_gripper_reading(binary[1])}: train "
            "on with the binary_gripper setting it was trained with"
        )
    actor.load_state_dict(saved.state_dict())
    return normalizer


def _gripper_reading(binary_gripper: bool) -> str:
    return "logit of closed (binary_gripper)" if binary_gripper else "squashed command"


def make_policy(actor: Actor | ChunkedActor, normalizer: Normalizer | None) -> Policy:
    """A new, independent deterministic `observation -> action` callable with a `reset()`.

    A `ChunkedActor` gives a `ChunkingPolicy` (temporal ensembling with the actor's
    ensemble_decay, single observations; reset it at every episode start), an `Actor` an
    `ActorPolicy` (single or batched observations; reset does nothing). On a small CPU, call
    `torch.set_num_threads(1)` first: one observation through a small MLP runs ~40x faster that
    way on 2 cores than with threads contending.
    """
    if isinstance(actor, ChunkedActor):
        return ChunkingPolicy(actor, normalizer)
    return ActorPolicy(actor, normalizer)


def load_policy(path: str | Path) -> Policy:
    """The saved actor of any baseline as a policy callable, normalisation included. A policy
    trained with coded actions acts in a CodedActions-wrapped env, which this cannot give: a
    ValueError says how to act it."""
    actor, normalizer, payload = load_checkpoint(path)
    coded = payload.get("args", {}).get("coded_skills")
    if coded is not None:
        raise ValueError(
            f"{path} was trained with coded actions ({coded!r}): its {actor.action_size} action "
            "numbers act through experimenter.coded_actions.CodedActions(env, "
            "load_coded_skills(args['coded_skills']), args['coded_max_steps']); load it with "
            "load_checkpoint and make_policy and step such an env"
        )
    return make_policy(actor, normalizer)


def check_env_id(env_id: str) -> None:
    """Raise a ValueError naming the GameOn ids if env_id is not one of them (the learners read
    their state and goal observations, which other envs do not have)."""
    if env_id not in ENV_IDS:
        raise ValueError(f"unknown env id {env_id!r}; the GameOn ids: {', '.join(ENV_IDS)}")
