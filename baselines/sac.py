"""SAC for the GameOn envs, after CleanRL's sac_continuous_action.py, in one file.

Run: python -m gameon.baselines.sac --env-id GameOn/Lift-v0 --reward-mode dense --seed 1

The policy sees `state` and `goal` concatenated and normalised by running statistics (raw
observations sit in the replay buffer and are normalised when sampled). Its tanh-squashed mean is a
`gameon.policy.Actor`, which is what the checkpoint keeps; a log-std layer on the actor's last
hidden features makes it a squashed Gaussian for training. Twin Q networks with Polyak-averaged
targets, an automatically tuned entropy temperature, and bootstrapping that stops at termination
only (a truncated transition stores its true final observation, from the vector env's SAME_STEP
autoreset).

`--demo-episodes N` puts N scripted-expert episodes (over the env's instructions, stored as
training stores its own) in a second buffer, and every batch draws `--demo-ratio` of its rows
from it, as RLPD does. This is SAC from demonstrations, a different baseline from plain SAC:
its summary and checkpoint name the demo count. `--critic-layer-norm` adds RLPD's LayerNorm to
the Q networks; with 200 demos it is the setting that learns Lift-v0 (README, Baselines).

With dense reward, training episodes do not end at success unless asked: a near-success state
pays almost 1 per step, so an episode cut off at success (1, then nothing) would be worth less
than hovering just outside success for the rest of the episode. Evaluation always ends there.

Every training episode's instruction comes from one curriculum (`--curriculum`: fixed, hand, lp,
vlm or a control, see `gameon.experimenter.curriculum`) living in this process: the vector env
is built with `make_curriculum_vec_env`, which proposes each episode's instruction (sync and async
alike) and reports how it went exactly once. The default, `fixed`, is uniform over the env's
instructions; before curricula the env sampled a skill uniformly and then an instruction of it,
so on a multi-skill env the mix of instructions differs slightly (uniform over instructions, not
skills). Evaluation never uses the curriculum: it runs the shared suite; its outcomes are reported
to the curriculum (`update_evaluation`). The curriculum's `state_dict()`
is saved with each checkpoint (in `extra["curriculum"]`) and in run_dir/curriculum.json;
TensorBoard gets training success per skill and, after each step that ended an episode, for
hand `curriculum/stage`, for lp the sampling probability of each skill (`curriculum/p_{skill}`,
summed over its instructions).

`--coded-skills templates` (or a skill-library JSON) offers coded skills beside the continuous
action (`experimenter.coded_actions.CodedActions`, RL-GPT's coded actions), in training and
evaluation. One agent step may then be many env steps: `total_timesteps`, `learning_starts` and
every step count stay in env steps, so runs with and without coded actions are compared at the
same env-step budget (a run may pass it by the last agent step's coded actions). Without the
option nothing changes.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gameon.baselines.common import (
    OnlineArgs,
    ProgressClock,
    SkillTally,
    TrainingDiverged,
    check_online_args,
    check_rate,
    make_training_curriculum,
    recent_episodes,
    run_cli,
    start_online_run,
    training_env_options,
)
from gameon.baselines.datasets import run_episode
from gameon.envs.language import all_instructions
from gameon.evaluation import EvalReport
from gameon.experimenter.coded_actions import vector_env_steps
from gameon.experimenter.curriculum import curriculum_scalars
from gameon.policy import Actor, Normalizer, Policy, flat_observation, flat_size

ALGO = "sac"
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
LOG_2PI = math.log(2 * math.pi)
DEMO_SEED = 1_000_000
"""Reset seeds of demo episodes start here, apart from training and evaluation seeds."""


@dataclass
class Args(OnlineArgs):
    """SAC's settings: the env, the budget and the algorithm's, after the shared ones."""

    env_id: str = "GameOn/Lift-v0"
    """the GameOn environment id"""
    total_timesteps: int = 1_000_000
    """env steps to train for, summed over envs"""
    reward_mode: Literal["sparse", "dense"] = "dense"
    """env reward: sparse (1 on success) or dense (staged shaping, 1 on success)"""
    print_every: int = 10_000
    """print a progress line every this many env steps"""
    log_every: int = 100
    """log losses to TensorBoard every this many gradient updates"""
    hidden: tuple[int, ...] = (256, 256)
    """hidden layer widths of the actor and of each Q network"""
    buffer_size: int = 1_000_000
    """replay capacity in transitions (never more than total_timesteps are allocated)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak coefficient of the target Q networks"""
    batch_size: int = 256
    """transitions per gradient update"""
    learning_starts: int = 5_000
    """env steps of uniformly random actions before learning starts (below total_timesteps)"""
    policy_lr: float = 3e-4
    """Adam learning rate of the actor"""
    q_lr: float = 1e-3
    """Adam learning rate of the Q networks (and of the temperature)"""
    updates_per_step: int = 1
    """gradient updates per vector-env step (each step adds num_envs transitions)"""
    policy_frequency: int = 2
    """actor updates are delayed: this many at once, every this many Q updates"""
    target_network_frequency: int = 1
    """Q updates between target network updates"""
    critic_layer_norm: bool = False
    """LayerNorm in the Q networks' hidden layers (as RLPD; steadies learning from demos)"""
    alpha: float = 0.2
    """entropy temperature (the start value when autotune is on)"""
    autotune: bool = True
    """tune the temperature towards target_entropy"""
    target_entropy: float | None = None
    """entropy the temperature is tuned towards; None: -action size (the SAC paper's choice)"""
    demo_episodes: int = 0
    """scripted-expert episodes in a demo buffer (0: plain SAC, no demonstrations)"""
    demo_ratio: float = 0.5
    """with demos: share of each batch drawn from the demo buffer (RLPD's symmetric sampling)"""


def check_args(args: Args) -> None:
    """Reject an unknown env id, an invalid setting or a budget that leaves no update (it would
    save an untrained policy) with a ValueError naming what is accepted."""
    check_online_args(args)
    positive = (
        "total_timesteps", "num_envs", "buffer_size", "batch_size", "updates_per_step",
        "policy_frequency", "target_network_frequency", "eval_episodes_per_skill",
        "torch_threads", "print_every", "log_every",
    )  # fmt: skip
    for name in positive:
        if getattr(args, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(args, name)}")
    if args.eval_every < 0:
        raise ValueError(f"eval_every must be >= 0 (0: only at the end), got {args.eval_every}")
    if args.demo_episodes < 0:
        raise ValueError(
            f"demo_episodes must be >= 0 (0: no demonstrations), got {args.demo_episodes}"
        )
    if not 0.0 < args.demo_ratio < 1.0:
        raise ValueError(f"demo_ratio must be in (0, 1), got {args.demo_ratio}")
    if args.learning_starts < 0:
        raise ValueError(f"learning_starts must be >= 0, got {args.learning_starts}")
    if args.total_timesteps <= args.learning_starts:
        raise ValueError(
            f"total_timesteps ({args.total_timesteps}) must exceed learning_starts "
            f"({args.learning_starts}): SAC learns only after learning_starts env steps"
        )
    if args.batch_size > min(args.buffer_size, args.total_timesteps):
        raise ValueError(
            f"batch_size ({args.batch_size}) must be <= buffer_size ({args.buffer_size}) and "
            f"total_timesteps ({args.total_timesteps}): no batch could be drawn"
        )
    updates = planned_updates(args)
    if updates < args.policy_frequency:
        raise ValueError(
            f"total_timesteps ({args.total_timesteps}) leaves {updates} critic update(s) after "
            f"learning_starts ({args.learning_starts}) with {args.num_envs} envs and batch_size "
            f"{args.batch_size}, fewer than policy_frequency ({args.policy_frequency}): the actor "
            "would never be trained; raise total_timesteps"
        )
    if args.coded_max_steps < 1:
        raise ValueError(f"coded_max_steps must be >= 1, got {args.coded_max_steps}")
    if args.coded_skills is not None and (args.capture_video or args.demo_episodes):
        raise ValueError("coded_skills works without capture_video and demo_episodes")
    if not 0.0 < args.tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {args.tau}")
    if not args.hidden or any(width < 1 for width in args.hidden):
        raise ValueError(f"hidden must be one or more widths >= 1, got {args.hidden}")
    check_algorithm_args(args)


def planned_updates(args: Args) -> int:
    """The critic updates a run of one-step actions makes: `updates_per_step` at each vector step
    that ends past `learning_starts` env steps with a batch in the buffer (a vector step is
    `num_envs` env steps)."""
    n = args.num_envs
    vector_steps = math.ceil(args.total_timesteps / n)
    first = max(args.learning_starts // n + 1, math.ceil(args.batch_size / n))
    return max(0, vector_steps - first + 1) * args.updates_per_step


def check_algorithm_args(args: Args) -> None:
    """Reject a learning rate, discount or temperature that torch or math would refuse only once
    the run folder is made (a rate <= 0, log of an alpha <= 0) or that would train on nonsense
    without a word (a discount above 1, a NaN target entropy); NaN fails every check."""
    for name in ("policy_lr", "q_lr"):
        check_rate(name, getattr(args, name))
    if not 0.0 <= args.gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {args.gamma}")
    check_rate("alpha", args.alpha)
    if args.target_entropy is not None and not math.isfinite(args.target_entropy):
        raise ValueError(f"target_entropy must be a finite number, got {args.target_entropy}")


class SquashedGaussianPolicy(nn.Module):
    """A `policy.Actor` (the checkpointed tanh mean) plus a log-std layer on its hidden features."""

    def __init__(self, obs_size: int, action_size: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.actor = Actor(obs_size, action_size, hidden, squash=True)
        self.trunk = self.actor.net[:-1]
        self.mean = self.actor.net[-1]
        self.log_std = nn.Linear(hidden[-1], action_size)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised squashed-Gaussian action and its log-probability."""
        features = self.trunk(obs)
        mean = self.mean(features)
        log_std = torch.tanh(self.log_std(features))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        noise = torch.randn_like(mean)
        pre_tanh = mean + torch.exp(log_std) * noise
        action = torch.tanh(pre_tanh)
        log_prob = -0.5 * noise.pow(2) - log_std - 0.5 * LOG_2PI
        log_prob = log_prob - torch.log(1.0 - action.pow(2) + 1e-6)
        return action, log_prob.sum(-1)


class QNetwork(nn.Module):
    """ReLU MLP from (normalised observation, action) to one Q value.

    With `layer_norm`, each hidden layer is normalised before its ReLU, which bounds how far Q
    can extrapolate to actions the data never took (RLPD's remedy for over-estimation).
    """

    def __init__(
        self, obs_size: int, action_size: int, hidden: tuple[int, ...], layer_norm: bool = False
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = obs_size + action_size
        for width in hidden:
            layers.append(nn.Linear(size, width))
            if layer_norm:
                layers.append(nn.LayerNorm(width))
            layers.append(nn.ReLU())
            size = width
        layers.append(nn.Linear(size, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q(obs, action), one value per row."""
        return self.net(torch.cat((obs, action), -1)).squeeze(-1)


class Batch(NamedTuple):
    """Sampled transitions; observations are raw (normalise them with the current statistics)."""

    obs: np.ndarray
    next_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray


@dataclass
class ReplayBuffer:
    """Preallocated numpy ring buffer of raw flat observations and transitions."""

    obs: np.ndarray
    next_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    position: int = 0
    size: int = 0

    @classmethod
    def allocate(cls, capacity: int, obs_size: int, action_size: int) -> ReplayBuffer:
        """Zeroed storage for `capacity` transitions (float32 throughout)."""
        return cls(
            np.zeros((capacity, obs_size), np.float32),
            np.zeros((capacity, obs_size), np.float32),
            np.zeros((capacity, action_size), np.float32),
            np.zeros(capacity, np.float32),
            np.zeros(capacity, np.float32),
        )

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        terminated: np.ndarray,
    ) -> None:
        """Append a batch of transitions (one per env), overwriting the oldest when full."""
        capacity = len(self.rewards)
        rows = (self.position + np.arange(len(rewards))) % capacity
        self.obs[rows], self.next_obs[rows], self.actions[rows] = obs, next_obs, actions
        self.rewards[rows], self.terminated[rows] = rewards, terminated
        self.position = int(rows[-1] + 1) % capacity
        self.size = min(self.size + len(rewards), capacity)

    def sample(self, rng: np.random.Generator, batch_size: int) -> Batch:
        """Transitions drawn uniformly with replacement from what the buffer holds."""
        rows = rng.integers(0, self.size, batch_size)
        return Batch(
            self.obs[rows],
            self.next_obs[rows],
            self.actions[rows],
            self.rewards[rows],
            self.terminated[rows],
        )


def sample_batch(
    buffer: ReplayBuffer,
    demos: ReplayBuffer | None,
    rng: np.random.Generator,
    batch_size: int,
    demo_ratio: float,
) -> Batch:
    """A batch from the replay buffer, with `demo_ratio` of its rows from the demos if any."""
    if demos is None:
        return buffer.sample(rng, batch_size)
    from_demos = round(batch_size * demo_ratio)
    online = buffer.sample(rng, batch_size - from_demos)
    demo = demos.sample(rng, from_demos)
    return Batch(*(np.concatenate(pair) for pair in zip(online, demo, strict=True)))


def expert_demos(args: Args) -> tuple[ReplayBuffer, float]:
    """`args.demo_episodes` scripted-expert episodes as transitions, and their success rate.

    Instructions are drawn uniformly from the env's; episodes end as training episodes do.
    """
    env = gym.make(args.env_id, **training_env_options(args))
    instructions = all_instructions(env.unwrapped.colours, env.unwrapped.skills)
    rng = np.random.default_rng(DEMO_SEED + args.seed)
    episodes = []
    for k in range(args.demo_episodes):
        instruction = instructions[int(rng.integers(len(instructions)))]
        seed = DEMO_SEED + args.seed * args.demo_episodes + k
        episodes.append(run_episode(env, str(instruction), seed, "expert", 0.0))
    env.close()
    flats = [flat_observation(episode["observations"]) for episode in episodes]
    total = sum(len(episode["actions"]) for episode in episodes)
    demos = ReplayBuffer.allocate(total, flats[0].shape[1], episodes[0]["actions"].shape[1])
    for flat, episode in zip(flats, episodes, strict=True):
        demos.add(
            flat[:-1], flat[1:], episode["actions"], episode["rewards"], episode["terminations"]
        )
    success = float(np.mean([episode["successes"].any() for episode in episodes]))
    return demos, success


def soft_update(net: nn.Module, target: nn.Module, tau: float) -> None:
    """Polyak averaging: target <- tau * net + (1 - tau) * target."""
    with torch.no_grad():
        for param, target_param in zip(net.parameters(), target.parameters(), strict=True):
            target_param.lerp_(param, tau)


def train(args: Args, on_eval: Callable[[Policy, EvalReport, int], None] | None = None) -> dict:
    """Train, evaluate and checkpoint; return a JSON-ready summary (also in run_dir/summary.json).
    A setting that cannot work, or a run_dir holding an earlier run, is a ValueError before any
    training.

    `on_eval(policy, report, global_step)` is called after each evaluation with the live policy
    (it follows further training) and the report it scored.
    """
    check_args(args)
    run = start_online_run(ALGO, args)
    curriculum, envs, writer = run.curriculum, run.envs, run.writer
    rng = np.random.default_rng(args.seed)
    obs_size = flat_size(envs.single_observation_space)
    action_size = int(np.prod(envs.single_action_space.shape))
    policy_net = SquashedGaussianPolicy(obs_size, action_size, args.hidden)
    actor = policy_net.actor
    qf1, qf2, qf1_target, qf2_target = (
        QNetwork(obs_size, action_size, args.hidden, args.critic_layer_norm) for _ in range(4)
    )
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_params = [*qf1.parameters(), *qf2.parameters()]
    q_optimizer = torch.optim.Adam(q_params, lr=args.q_lr, fused=True)
    actor_optimizer = torch.optim.Adam(policy_net.parameters(), lr=args.policy_lr, fused=True)
    target_entropy = -float(action_size) if args.target_entropy is None else args.target_entropy
    log_alpha = torch.tensor(math.log(args.alpha), requires_grad=True)
    alpha_optimizer = torch.optim.Adam([log_alpha], lr=args.q_lr)
    alpha = args.alpha
    normalizer = Normalizer.zeros(obs_size)
    buffer = ReplayBuffer.allocate(
        min(args.buffer_size, args.total_timesteps), obs_size, action_size
    )
    global_step, agent_steps, updates = 0, 0, 0
    try:
        demos, demo_success = None, None
        if args.demo_episodes:
            demos, demo_success = expert_demos(args)
            normalizer.update(demos.obs)
            print(
                f"demos: {args.demo_episodes} expert episodes, {demos.size} transitions, "
                f"success {demo_success:.2f}"
            )

        n = args.num_envs
        episode_return = np.zeros(n)
        episode_length = np.zeros(n, np.int64)
        recent_success: deque[float] = deque(maxlen=100)
        recent_return: deque[float] = deque(maxlen=100)
        tally = SkillTally()
        env_seconds = learn_seconds = 0.0
        next_eval = args.eval_every
        progress = ProgressClock(args.print_every, args.total_timesteps)
        losses: dict[str, float] = {}

        start_time = time.perf_counter()
        observation, _ = envs.reset(seed=args.seed)
        envs.action_space.seed(args.seed)
        flat = flat_observation(observation)
        normalizer.update(flat)

        while global_step < args.total_timesteps:
            if global_step < args.learning_starts:
                action = envs.action_space.sample()
            else:
                with torch.no_grad():
                    action, _ = policy_net.sample(torch.from_numpy(normalizer(flat)))
                action = action.numpy()

            t0 = time.perf_counter()
            observation, reward, terminated, truncated, info = envs.step(action)
            env_seconds += time.perf_counter() - t0
            ended = terminated | truncated
            env_steps = vector_env_steps(info, ended)
            global_step += int(env_steps.sum())
            agent_steps += n
            next_flat = flat_observation(observation)
            stored_next = next_flat
            episode_return += reward
            episode_length += env_steps
            if ended.any():
                stored_next = next_flat.copy()
                final_info = info["final_info"]
                for i in np.flatnonzero(ended):
                    stored_next[i] = flat_observation(info["final_obs"][i])
                    success = float(final_info["success"][i])
                    recent_success.append(success)
                    recent_return.append(float(episode_return[i]))
                    skill = tally.add(final_info["instruction"][i], bool(success))
                    writer.add_scalar("charts/episodic_return", episode_return[i], global_step)
                    writer.add_scalar("charts/episodic_length", episode_length[i], global_step)
                    writer.add_scalar("charts/success_rate", np.mean(recent_success), global_step)
                    writer.add_scalar(
                        f"charts/success_rate_{skill}", tally.rate(skill), global_step
                    )
                    episode_return[i], episode_length[i] = 0.0, 0
                for tag, value in curriculum_scalars(curriculum).items():
                    writer.add_scalar(tag, value, global_step)
            buffer.add(flat, stored_next, action, reward, terminated)
            normalizer.update(next_flat)
            flat = next_flat

            if global_step > args.learning_starts and buffer.size >= args.batch_size:
                t0 = time.perf_counter()
                for _ in range(args.updates_per_step):
                    batch = sample_batch(buffer, demos, rng, args.batch_size, args.demo_ratio)
                    b_obs = torch.from_numpy(normalizer(batch.obs))
                    b_next_obs = torch.from_numpy(normalizer(batch.next_obs))
                    b_actions = torch.from_numpy(batch.actions)
                    b_rewards = torch.from_numpy(batch.rewards)
                    b_alive = 1.0 - torch.from_numpy(batch.terminated)
                    with torch.no_grad():
                        next_actions, next_log_prob = policy_net.sample(b_next_obs)
                        next_q = torch.min(
                            qf1_target(b_next_obs, next_actions),
                            qf2_target(b_next_obs, next_actions),
                        )
                        next_q = next_q - alpha * next_log_prob
                        target = b_rewards + args.gamma * b_alive * next_q
                    q1, q2 = qf1(b_obs, b_actions), qf2(b_obs, b_actions)
                    qf1_loss, qf2_loss = F.mse_loss(q1, target), F.mse_loss(q2, target)
                    q_optimizer.zero_grad()
                    (qf1_loss + qf2_loss).backward()
                    q_optimizer.step()
                    updates += 1

                    if updates % args.policy_frequency == 0:
                        qf1.requires_grad_(False)
                        qf2.requires_grad_(False)
                        for _ in range(args.policy_frequency):
                            new_actions, log_prob = policy_net.sample(b_obs)
                            q = torch.min(qf1(b_obs, new_actions), qf2(b_obs, new_actions))
                            actor_loss = (alpha * log_prob - q).mean()
                            actor_optimizer.zero_grad()
                            actor_loss.backward()
                            actor_optimizer.step()
                            if args.autotune:
                                alpha_loss = -(
                                    log_alpha.exp() * (log_prob.detach() + target_entropy)
                                ).mean()
                                alpha_optimizer.zero_grad()
                                alpha_loss.backward()
                                alpha_optimizer.step()
                                alpha = log_alpha.exp().item()
                        qf1.requires_grad_(True)
                        qf2.requires_grad_(True)
                        losses["losses/actor_loss"] = actor_loss.item()
                        losses["losses/entropy"] = -log_prob.mean().item()
                        if args.autotune:
                            losses["losses/alpha_loss"] = alpha_loss.item()

                    if updates % args.target_network_frequency == 0:
                        soft_update(qf1, qf1_target, args.tau)
                        soft_update(qf2, qf2_target, args.tau)

                    if updates % args.log_every == 0:
                        losses["losses/qf1_loss"] = qf1_loss.item()
                        losses["losses/qf2_loss"] = qf2_loss.item()
                        losses["losses/qf1_values"] = q1.mean().item()
                        losses["losses/alpha"] = alpha
                        for key, value in losses.items():
                            writer.add_scalar(key, value, global_step)
                learn_seconds += time.perf_counter() - t0

            if progress.due(global_step):
                wall = time.perf_counter() - start_time - run.eval_seconds
                sps = global_step / wall
                writer.add_scalar("charts/SPS", sps, global_step)
                writer.add_scalar("time/env_seconds", env_seconds, global_step)
                writer.add_scalar("time/learn_seconds", learn_seconds, global_step)
                writer.add_scalar("time/train_seconds", wall, global_step)
                print(
                    f"step {global_step} | {recent_episodes(recent_success, recent_return)} | "
                    f"SPS {sps:.0f} | env {env_seconds:.0f}s learn {learn_seconds:.0f}s | "
                    f"updates {updates} alpha {alpha:.3f} | {progress.left(global_step, sps)}"
                )
            if args.eval_every and global_step >= next_eval and global_step < args.total_timesteps:
                next_eval = (global_step // args.eval_every + 1) * args.eval_every
                run.evaluate(actor, normalizer, global_step, on_eval)

        envs.close()
        train_seconds = time.perf_counter() - start_time - run.eval_seconds
        report = run.evaluate(actor, normalizer, global_step, on_eval)
    except (KeyboardInterrupt, TrainingDiverged) as stop:
        run.interrupted(global_step, stop)
        raise
    seconds = {
        "train_seconds": train_seconds,
        "env_seconds": env_seconds,
        "learn_seconds": learn_seconds,
    }
    return run.finish(
        report,
        global_step,
        seconds,
        tally,
        agent_steps,
        updates=updates,
        demo_episodes=args.demo_episodes,
        demo_success=demo_success,
    )


if __name__ == "__main__":
    run_cli(train, Args, "python -m gameon.baselines.sac", check_args, make_training_curriculum)
