"""What every baseline shares: flat observations, a running normaliser, the goal-conditioned actors
(`Actor`, one action per observation; `ChunkedActor`, the next `chunk_length` actions, acted
through `ChunkingPolicy`'s temporal ensemble) and the checkpoint format that turns a saved actor
back into a policy callable.

One file per algorithm stays readable top to bottom; only the pieces a reloaded policy needs (so
that the experimenter can run any learner's checkpoint as a skill) and the plumbing around run
folders, evaluation and checkpoints that the learners share live here.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pickle
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import gameon
from gameon.benchmark.evaluation import EvalReport, evaluate, evaluation_suite
from gameon.envs.language import COLOURS, MAX_TOWER, SKILLS, parse
from gameon.envs.world import PROPRIO_SIZE, state_size
from gameon.experimenter.curriculum import (
    CURRICULA,
    Curriculum,
    Outcome,
    curriculum_for_env,
    make_curriculum,
    save_curriculum,
)
from gameon.experimenter.curriculum_wrapper import make_curriculum_vec_env

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

CHECKPOINT_FORMAT = "gameon-policy-v3"
"""v2: flat observations end with the instruction's blocks relative to the TCP. v3: adds
`actor_kind` ("mlp" or "chunked") and, for chunked actors, chunk_length, binary_gripper and
ensemble_decay. Both load; v2 checkpoints hold `Actor`s."""
READABLE_FORMATS = ("gameon-policy-v2", CHECKPOINT_FORMAT)
_SLOTS = slice(len(SKILLS), len(SKILLS) + MAX_TOWER * len(COLOURS))
Policy = Callable[[dict[str, np.ndarray]], np.ndarray]


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
    """(..., MAX_TOWER * 3): each named block's position relative to the TCP, slot by slot.

    Assumes the scene's blocks are the first n colours of `language.COLOURS` (the default).
    """
    n = blocks_in_state(state.shape[-1])
    batch = state.shape[:-1]
    blocks = state[..., PROPRIO_SIZE:].reshape(*batch, n, 17 + n)[..., :3]
    slots = goal[..., _SLOTS].reshape(*batch, MAX_TOWER, len(COLOURS))[..., :n]
    tcp = state[..., 14:17]
    relative = slots @ blocks - slots.sum(-1, keepdims=True) * tcp[..., None, :]
    return relative.reshape(*batch, MAX_TOWER * 3)


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


class ActorPolicy:
    """An `Actor`'s deterministic `observation -> action` (single or batched observations), with
    torch on the live actor; `reset()` does nothing (it has no memory)."""

    def __init__(self, actor: Actor, normalizer: Normalizer | None) -> None:
        self.actor, self.normalizer = actor, normalizer

    def reset(self) -> None:
        """Nothing to clear."""

    def __call__(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        x = flat_observation(observation)
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
        x = flat_observation(observation)
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
    """Write the actor, its normaliser and the run's arguments atomically to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path


def load_checkpoint(path: str | Path) -> tuple[Actor | ChunkedActor, Normalizer | None, dict]:
    """Read a checkpoint (format v2 or v3); a missing, corrupt or foreign file raises ValueError
    saying which. The actor is a `ChunkedActor` (with its saved ensemble_decay) if it was saved
    as one, else an `Actor`."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, ValueError) as error:
        raise ValueError(f"{path} is not a readable checkpoint ({error})") from None
    if not isinstance(payload, dict) or payload.get("format") not in READABLE_FORMATS:
        raise ValueError(
            f"{path} is not a GameOn policy checkpoint (format {' or '.join(READABLE_FORMATS)})"
        )
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
    normalizer = None if saved is None else Normalizer(**saved)
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
    actor.load_state_dict(saved.state_dict())
    return normalizer


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
    """The saved actor of any baseline as a policy callable, normalisation included."""
    actor, normalizer, _ = load_checkpoint(path)
    return make_policy(actor, normalizer)


def seed_everything(seed: int, torch_deterministic: bool = True) -> None:
    """Seed numpy, torch and Python's random as CleanRL does and, with torch_deterministic, ask
    torch for deterministic kernels (warning, not failing, where an op has none), so a run on the
    CPU with one thread is bitwise reproducible (the leaderboard audit relies on it)."""
    import os
    import random

    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002  (libraries that still use the global generator)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic
    if torch_deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    torch.use_deterministic_algorithms(torch_deterministic, warn_only=True)


def check_env_id(env_id: str) -> None:
    """Raise a ValueError naming the registered ids if env_id is not one of them."""
    import gameon.envs  # noqa: F401  (registers the ids)

    if env_id not in gym.registry:
        ids = ", ".join(k for k in gym.registry if k.startswith("GameOn/"))
        raise ValueError(f"unknown env id {env_id!r}; registered GameOn ids: {ids}")


class SkillTally:
    """Training episodes per skill: counts and successes, and success over the last 100 each."""

    def __init__(self) -> None:
        self.episodes: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()
        self.recent: dict[str, deque[float]] = {}

    def add(self, instruction: str, success: bool) -> str:
        """Count one finished episode; return its skill."""
        skill = parse(instruction).skill
        self.episodes[skill] += 1
        self.successes[skill] += int(success)
        self.recent.setdefault(skill, deque(maxlen=100)).append(float(success))
        return skill

    def rate(self, skill: str) -> float:
        """Success rate over the skill's last 100 training episodes."""
        return float(np.mean(self.recent[skill]))

    def to_dict(self) -> dict:
        return {
            skill: {"episodes": count, "successes": self.successes[skill]}
            for skill, count in sorted(self.episodes.items())
        }


def default_run_dir(algo: str, name: str, seed: int) -> Path:
    """runs/{algo}__{name with / as _}__{seed}__{unix time}, as CleanRL names its runs."""
    return Path("runs") / f"{algo}__{name.replace('/', '_')}__{seed}__{int(time.time())}"


def evaluate_and_save(
    algo: str,
    args: Any,
    actor: Actor | ChunkedActor,
    normalizer: Normalizer,
    run_dir: Path,
    global_step: int,
    writer: SummaryWriter,
    on_eval: Callable[[Policy, EvalReport, int], None] | None,
    curriculum: Curriculum,
    env_wrapper: Callable[[gym.Env], gym.Env] | None = None,
) -> EvalReport:
    """Score an online learner's deterministic policy on the shared suite, tell the curriculum
    (`update_evaluation`); write eval.json, checkpoint.pt and curriculum.json (the curriculum's
    state, also in the checkpoint's extra). `env_wrapper` wraps the evaluation env as the
    training envs are wrapped (coded actions).

    `args` is the learner's Args dataclass: saved whole in the checkpoint, and read for env_id,
    reward_mode, eval_episodes_per_skill, capture_video (an MP4 per evaluation in
    run_dir/videos/eval_{global_step}.mp4) and torch_threads.
    """
    actor.eval()
    policy = make_policy(actor, normalizer)
    report = evaluate(
        policy,
        args.env_id,
        episodes_per_skill=args.eval_episodes_per_skill,
        env_kwargs={"reward_mode": args.reward_mode},
        video=run_dir / "videos" / f"eval_{global_step}.mp4" if args.capture_video else None,
        wrapper=env_wrapper,
    )
    actor.train()
    torch.set_num_threads(args.torch_threads)
    curriculum.update_evaluation(
        [Outcome(e.instruction, e.success, e.episode_return) for e in report.episodes]
    )
    record = {**report.to_dict(), "global_step": global_step}
    (run_dir / "eval.json").write_text(json.dumps(record, indent=1))
    save_checkpoint(
        run_dir / "checkpoint.pt",
        algo,
        args.env_id,
        actor,
        normalizer,
        dataclasses.asdict(args),
        extra={"global_step": global_step, "curriculum": curriculum.state_dict()},
    )
    save_curriculum(run_dir / "curriculum.json", curriculum)
    writer.add_scalar("eval/success_rate", report.success_rate, global_step)
    for skill, rate in report.rates().items():
        writer.add_scalar(f"eval/success_rate_{skill}", rate, global_step)
    rates = ", ".join(f"{skill} {rate:.2f}" for skill, rate in report.rates().items())
    print(f"eval at step {global_step}: success {report.success_rate:.2f} ({rates})")
    if on_eval is not None:
        on_eval(policy, report, global_step)
    return report


def evaluate_actor(
    actor: Actor | ChunkedActor,
    normalizer: Normalizer,
    env_id: str,
    episodes_per_skill: int,
    torch_threads: int,
) -> EvalReport:
    """Evaluate a CPU copy of an (offline learner's) actor on the shared suite, then set torch
    back to `torch_threads` threads for training."""
    policy = make_policy(copy.deepcopy(actor).cpu().eval(), normalizer)
    report = evaluate(policy, env_id, episodes_per_skill=episodes_per_skill)
    torch.set_num_threads(torch_threads)  # make_policy sets one thread for acting
    return report


def record_videos(policy: Policy, env_id: str, run_dir: Path) -> list[str]:
    """Write run_dir/videos/{skill}.mp4 per skill: the first episode of that skill in the suite."""
    paths = []
    for task in evaluation_suite(env_id, episodes_per_skill=1):
        path = run_dir / "videos" / f"{parse(task.instruction).skill}.mp4"
        evaluate(policy, env_id, suite=[task], video=path)
        paths.append(str(path))
    return paths


def make_training_curriculum(args: Any, run_dir: Path | None = None) -> Curriculum:
    """An online learner's curriculum from its Args (ppo and sac share the fields); a ValueError
    says why it cannot train there.

    vlm: its transcript goes to run_dir/transcript.jsonl (none while run_dir is None). The budget
    the curriculum is told (hand sizes its `window_share` stages with it) is
    `episode_budget(env_id, total_timesteps, num_envs, max_episode_steps)`: a lower bound on the
    training episodes the run reports, since episodes that end at success are shorter. The
    controls aim at the env's own target skills.
    """
    from gameon.experimenter.curriculum import episode_budget

    seed = args.seed if args.curriculum_seed is None else args.curriculum_seed
    budget = episode_budget(
        args.env_id, args.total_timesteps, args.num_envs, args.max_episode_steps
    )
    vlm_options = None
    if args.curriculum == "vlm":
        vlm_options = {
            "backend": args.vlm_backend,
            "model": args.vlm_model,
            "base_url": args.vlm_base_url,
            "replay_path": args.vlm_replay,
            "transcript": run_dir,
            "interval": args.vlm_interval,
        }
    return curriculum_for_env(
        args.env_id,
        args.curriculum,
        seed,
        hand_path=args.hand_curriculum,
        targets_only=args.curriculum_tasks == "targets",
        vlm_options=vlm_options,
        budget=budget,
    )


def terminates_on_success(args: Any) -> bool:
    """Whether an online learner's training episodes end at success (evaluation's always do)."""
    if args.terminate_on_success is None:
        return args.reward_mode == "sparse"
    return args.terminate_on_success


def training_env_options(args: Any) -> dict:
    """gym.make keyword arguments of an online learner's training env: reward, success ending,
    step limit (ppo and sac share the fields)."""
    options = {
        "reward_mode": args.reward_mode,
        "terminate_on_success": terminates_on_success(args),
    }
    if args.max_episode_steps is not None:
        options["max_episode_steps"] = args.max_episode_steps
    return options


def make_training_envs(args: Any, curriculum: Curriculum) -> gym.vector.VectorEnv:
    """Vector envs whose episodes the curriculum picks, reset within the same step (SAME_STEP)."""
    return make_curriculum_vec_env(
        args.env_id,
        args.num_envs,
        curriculum,
        vectorization_mode=args.vectorization,
        **training_env_options(args),
    )


CURRICULUM_TASKS = ("all", "targets")
"""What an online curriculum's tasks are: every instruction the env accepts, or its targets'."""


def check_curriculum_args(args: Any) -> None:
    """Reject curriculum settings of an online learner's Args that cannot work together."""
    if args.curriculum not in CURRICULA:
        make_curriculum(args.curriculum)  # raises, naming the accepted ones
    if args.curriculum_tasks not in CURRICULUM_TASKS:
        raise ValueError(
            f"unknown curriculum_tasks {args.curriculum_tasks!r}; accepted: all, targets"
        )
    vlm_only = (args.vlm_model, args.vlm_base_url, args.vlm_replay)
    if args.curriculum != "vlm" and any(value is not None for value in vlm_only):
        raise ValueError(
            f"vlm_model, vlm_base_url and vlm_replay are only read by the vlm curriculum, "
            f"not {args.curriculum!r}"
        )
    if args.vlm_interval < 1:
        raise ValueError(f"vlm_interval must be >= 1 episodes, got {args.vlm_interval}")
    if args.hand_curriculum is not None and args.curriculum != "hand":
        raise ValueError(
            f"hand_curriculum is only read by the hand curriculum, not {args.curriculum!r}"
        )
