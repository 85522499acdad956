"""PPO for the GameOn envs, after CleanRL's ppo_continuous_action.py, in one file.

Run: python -m gameon.baselines.ppo --env-id GameOn/Reach-v0 --seed 1

The policy sees `state` and `goal` concatenated and normalised by running statistics; its mean is a
`gameon.policy.Actor` (unsquashed) with a state-independent log std, and actions are clipped to
[-1, 1] before they reach the env. Rollouts act through NumPy copies of the actor and critic,
refreshed after every update: two rows per step run ~5x faster in NumPy than through torch's per-
operation dispatch, which was a sixth of the wall time. Vector envs reset in SAME_STEP mode, so a
truncated episode is bootstrapped from the value of its final observation and a terminated one is
not. At the end (and every `eval_every` steps) the deterministic policy runs the shared evaluation
suite, and the actor and normaliser are saved in the common checkpoint format.

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
TensorBoard gets training success per skill and, for hand, `curriculum/stage`, for lp, the
sampling probability of each skill (`curriculum/p_{skill}`, summed over its instructions).

`--coded-skills templates` (or a skill-library JSON) offers coded skills beside the continuous
action (`experimenter.coded_actions.CodedActions`, RL-GPT's coded actions), in training and
evaluation. One agent step may then be many env steps: `total_timesteps` and every step count
stay in env steps, and the last rollout stops early when the budget is spent, so runs with and
without coded actions are compared at the same env-step budget. Without the option nothing
changes.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

from gameon.baselines.common import (
    OnlineArgs,
    ProgressClock,
    SkillTally,
    TrainingDiverged,
    check_finite,
    check_online_args,
    check_rate,
    make_training_curriculum,
    recent_episodes,
    run_cli,
    start_online_run,
)
from gameon.evaluation import EvalReport
from gameon.experimenter.coded_actions import vector_env_steps
from gameon.experimenter.curriculum import curriculum_scalars
from gameon.policy import Actor, Normalizer, Policy, flat_observation, flat_size

ALGO = "ppo"
LOG_2PI = math.log(2 * math.pi)
MAX_LOG_STD = 20.0
"""init_log_std's bound: exp(100) overflows float32, which made every action NaN."""


@dataclass
class Args(OnlineArgs):
    """PPO's settings: the env, the budget and the algorithm's, after the shared ones."""

    env_id: str = "GameOn/Reach-v0"
    """the GameOn environment id"""
    total_timesteps: int = 300_000
    """env steps to train for, summed over envs (rounded up to whole rollouts)"""
    reward_mode: Literal["sparse", "dense"] = "sparse"
    """env reward: sparse (1 on success) or dense (staged shaping, 1 on success)"""
    print_every: int = 20_000
    """print a progress line every this many env steps"""
    hidden: tuple[int, ...] = (64, 64)
    """hidden layer widths of the actor and of the value network"""
    learning_rate: float = 3e-4
    """Adam learning rate"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over the run"""
    num_steps: int = 1024
    """steps per env per rollout"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    num_minibatches: int = 16
    """minibatches per epoch"""
    update_epochs: int = 10
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss as in the PPO paper's code"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient clipping norm"""
    target_kl: float | None = None
    """stop the epochs of an update early when the approximate KL exceeds this"""
    init_log_std: float = 0.0
    """initial log standard deviation of the Gaussian policy"""


def planned_env_steps(args: Args) -> int:
    """The env steps a run takes: total_timesteps rounded up to whole rollouts (with coded skills,
    whose actions last many env steps, total_timesteps itself)."""
    if args.coded_skills:
        return args.total_timesteps
    rollout = args.num_envs * args.num_steps
    return math.ceil(args.total_timesteps / rollout) * rollout


def check_args(args: Args) -> None:
    """Reject an unknown env id or an invalid setting with a ValueError naming what is accepted."""
    check_online_args(args)
    positive = ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs")
    for name in (*positive, "eval_episodes_per_skill", "torch_threads", "print_every"):
        if getattr(args, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(args, name)}")
    if args.eval_every < 0:
        raise ValueError(f"eval_every must be >= 0 (0: only at the end), got {args.eval_every}")
    if args.coded_max_steps < 1:
        raise ValueError(f"coded_max_steps must be >= 1, got {args.coded_max_steps}")
    if args.coded_skills is not None and args.capture_video:
        raise ValueError("capture_video does not film coded actions; drop one of the two")
    batch_size = args.num_envs * args.num_steps
    if args.num_minibatches > batch_size // 2:
        raise ValueError(
            f"num_minibatches ({args.num_minibatches}) must leave minibatches of 2 or more "
            f"transitions, whose advantages PPO normalises: num_envs * num_steps is {batch_size}, "
            f"so at most {batch_size // 2} minibatches"
        )
    if not args.hidden or any(width < 1 for width in args.hidden):
        raise ValueError(f"hidden must be one or more widths >= 1, got {args.hidden}")
    check_algorithm_args(args)


def check_algorithm_args(args: Args) -> None:
    """Reject a rate, coefficient or norm that torch would refuse only once the run folder is
    made (a learning rate <= 0) or that would train on nonsense without a word (a discount above
    1, a negative clip); NaN fails every check."""
    check_rate("learning_rate", args.learning_rate)
    for name in ("gamma", "gae_lambda"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(args, name)}")
    for name in ("clip_coef", "max_grad_norm"):
        if not getattr(args, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(args, name)}")
    for name in ("ent_coef", "vf_coef"):
        if not (getattr(args, name) >= 0 and math.isfinite(getattr(args, name))):
            raise ValueError(f"{name} must be >= 0, got {getattr(args, name)}")
    if args.target_kl is not None and not args.target_kl > 0:
        raise ValueError(f"target_kl must be > 0 (or None: no early stop), got {args.target_kl}")
    if not -MAX_LOG_STD <= args.init_log_std <= MAX_LOG_STD:  # NaN too
        raise ValueError(
            f"init_log_std must be a number in [-{MAX_LOG_STD:g}, {MAX_LOG_STD:g}] (the log of the "
            f"actions' std, which are clipped to [-1, 1]), got {args.init_log_std}"
        )


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights and constant bias, the initialisation PPO implementations rely on."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def make_actor(obs_size: int, action_size: int, hidden: tuple[int, ...]) -> Actor:
    """The checkpointed mean network, initialised so that first actions are near zero."""
    actor = Actor(obs_size, action_size, hidden, squash=False)
    linears = [m for m in actor.net if isinstance(m, nn.Linear)]
    for layer in linears[:-1]:
        layer_init(layer)
    layer_init(linears[-1], std=0.01)
    return actor


def make_critic(obs_size: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """Tanh MLP from the normalised observation to the state value."""
    layers: list[nn.Module] = []
    size = obs_size
    for width in hidden:
        layers += [layer_init(nn.Linear(size, width)), nn.Tanh()]
        size = width
    layers.append(layer_init(nn.Linear(size, 1), std=1.0))
    return nn.Sequential(*layers)


def gaussian_log_prob(
    action: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """Log density of a diagonal Gaussian, summed over action dimensions."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)


def numpy_mlp(net: nn.Sequential) -> Callable[[np.ndarray], np.ndarray]:
    """A NumPy copy of a tanh MLP's forward pass (tanh between layers, none after the last).

    A snapshot: take a new copy after the weights change.
    """
    layers = [
        (module.weight.detach().numpy().T.copy(), module.bias.detach().numpy().copy())
        for module in net
        if isinstance(module, nn.Linear)
    ]
    if any(not isinstance(m, (nn.Linear, nn.Tanh)) for m in net):
        raise ValueError("numpy_mlp copies MLPs of Linear and Tanh layers only")

    def forward(x: np.ndarray) -> np.ndarray:
        for weight, bias in layers[:-1]:
            x = np.tanh(x @ weight + bias)
        weight, bias = layers[-1]
        return x @ weight + bias

    return forward


def generalised_advantages(
    rewards: np.ndarray,
    values: np.ndarray,
    ends: np.ndarray,
    next_value: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> np.ndarray:
    """GAE over a (steps, envs) rollout; `ends[t]` marks transitions that finished an episode.

    A truncated transition's reward already holds gamma * V(final observation), so an ended
    transition never looks past itself; `next_value` is V of the observation after the rollout.
    """
    advantages = np.zeros_like(rewards)
    last = np.zeros_like(next_value)
    for t in reversed(range(len(rewards))):
        following = next_value if t == len(rewards) - 1 else values[t + 1]
        alive = 1.0 - ends[t]
        delta = rewards[t] + gamma * following * alive - values[t]
        last = delta + gamma * gae_lambda * alive * last
        advantages[t] = last
    return advantages


def train(args: Args, on_eval: Callable[[Policy, EvalReport, int], None] | None = None) -> dict:
    """Train, evaluate and checkpoint; return a JSON-ready summary (also in run_dir/summary.json).
    A setting that cannot work, or a run_dir holding an earlier run, is a ValueError before any
    training.

    `on_eval(policy, report, global_step)` is called after each evaluation with the live policy
    (it follows further training) and the report it scored.
    """
    check_args(args)
    run = start_online_run(ALGO, args, planned_env_steps(args))
    curriculum, envs, writer = run.curriculum, run.envs, run.writer
    obs_size = flat_size(envs.single_observation_space)
    action_size = int(np.prod(envs.single_action_space.shape))
    actor = make_actor(obs_size, action_size, args.hidden)
    log_std = nn.Parameter(torch.full((action_size,), args.init_log_std))
    critic = make_critic(obs_size, args.hidden)
    params = [*actor.parameters(), log_std, *critic.parameters()]
    optimizer = torch.optim.Adam(params, lr=args.learning_rate, eps=1e-5, fused=True)
    normalizer = Normalizer.zeros(obs_size)

    n, steps = args.num_envs, args.num_steps
    batch_size = n * steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = math.ceil(args.total_timesteps / batch_size)
    obs_buf = np.zeros((steps, n, obs_size), np.float32)
    action_buf = np.zeros((steps, n, action_size), np.float32)
    logprob_buf = np.zeros((steps, n), np.float32)
    reward_buf = np.zeros((steps, n), np.float32)
    end_buf = np.zeros((steps, n), np.float32)
    value_buf = np.zeros((steps, n), np.float32)

    episode_return = np.zeros(n)
    episode_length = np.zeros(n, np.int64)
    recent_success: deque[float] = deque(maxlen=100)
    recent_return: deque[float] = deque(maxlen=100)
    tally = SkillTally()
    env_seconds = learn_seconds = 0.0
    global_step, agent_steps, next_eval = 0, 0, args.eval_every
    progress = ProgressClock(args.print_every, args.total_timesteps)

    try:
        noise_rng = np.random.default_rng(args.seed)
        start_time = time.perf_counter()
        observation, _ = envs.reset(seed=args.seed)
        envs.action_space.seed(args.seed)
        flat = flat_observation(observation)
        normalizer.update(flat)
        x = normalizer(flat)

        while global_step < args.total_timesteps:
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = args.learning_rate * (
                    1.0 - global_step / (num_iterations * batch_size)
                )
            act_mean, value_of = numpy_mlp(actor.net), numpy_mlp(critic)
            std = np.exp(log_std.detach().numpy())
            log_norm = float(log_std.detach().sum()) + 0.5 * LOG_2PI * action_size
            rows = steps
            for step in range(steps):
                obs_buf[step] = x
                noise = noise_rng.standard_normal((n, action_size), np.float32)
                action = act_mean(x) + std * noise
                logprob_buf[step] = -0.5 * (noise * noise).sum(-1) - log_norm
                value_buf[step] = value_of(x)[:, 0]
                action_buf[step] = action

                t0 = time.perf_counter()
                observation, reward, terminated, truncated, info = envs.step(
                    np.clip(action, -1.0, 1.0)
                )
                env_seconds += time.perf_counter() - t0
                flat = flat_observation(observation)
                normalizer.update(flat)
                x = normalizer(flat)
                reward = reward.astype(np.float32)
                ended = terminated | truncated
                env_steps = vector_env_steps(info, ended)
                global_step += int(env_steps.sum())
                agent_steps += n
                episode_return += reward
                episode_length += env_steps

                if ended.any():
                    final_info = info["final_info"]
                    for i in np.flatnonzero(ended):
                        if truncated[i] and not terminated[i]:
                            final = normalizer(flat_observation(info["final_obs"][i]))
                            reward[i] += args.gamma * float(value_of(final)[0])
                        success = float(final_info["success"][i])
                        recent_success.append(success)
                        recent_return.append(float(episode_return[i]))
                        skill = tally.add(final_info["instruction"][i], bool(success))
                        writer.add_scalar("charts/episodic_return", episode_return[i], global_step)
                        writer.add_scalar("charts/episodic_length", episode_length[i], global_step)
                        writer.add_scalar(
                            "charts/success_rate", np.mean(recent_success), global_step
                        )
                        skill_rate = tally.rate(skill)
                        writer.add_scalar(f"charts/success_rate_{skill}", skill_rate, global_step)
                        episode_return[i], episode_length[i] = 0.0, 0
                reward_buf[step] = reward
                end_buf[step] = ended
                if (
                    run.coded_skills is not None
                    and step > 0
                    and global_step >= args.total_timesteps
                ):
                    rows = step + 1  # the env-step budget is spent: learn from the rows so far
                    break

            t0 = time.perf_counter()
            next_value = value_of(x)[:, 0]
            values = value_buf[:rows]
            advantages = generalised_advantages(
                reward_buf[:rows], values, end_buf[:rows], next_value, args.gamma, args.gae_lambda
            )
            returns = advantages + values

            rollout_size = rows * n
            rollout_minibatch = min(minibatch_size, rollout_size)
            b_obs = torch.from_numpy(obs_buf[:rows].reshape(rollout_size, obs_size))
            b_actions = torch.from_numpy(action_buf[:rows].reshape(rollout_size, action_size))
            b_logprobs = torch.from_numpy(logprob_buf[:rows].reshape(-1))
            b_advantages = torch.from_numpy(advantages.reshape(-1))
            b_returns = torch.from_numpy(returns.reshape(-1))
            b_values = torch.from_numpy(values.reshape(-1))
            clipfracs = []
            for _ in range(args.update_epochs):
                order = torch.randperm(rollout_size)
                for start in range(0, rollout_size - rollout_minibatch + 1, rollout_minibatch):
                    mb = order[start : start + rollout_minibatch]
                    new_logprob = gaussian_log_prob(b_actions[mb], actor(b_obs[mb]), log_std)
                    logratio = new_logprob - b_logprobs[mb]
                    ratio = logratio.exp()
                    with torch.no_grad():
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs.append(
                            ((ratio - 1.0).abs() > args.clip_coef).float().mean().item()
                        )
                    mb_adv = b_advantages[mb]
                    if args.norm_adv:
                        mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                    pg_loss = torch.max(
                        -mb_adv * ratio,
                        -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef),
                    ).mean()

                    new_value = critic(b_obs[mb]).squeeze(-1)
                    value_error = (new_value - b_returns[mb]).pow(2)
                    if args.clip_vloss:
                        clipped = b_values[mb] + torch.clamp(
                            new_value - b_values[mb], -args.clip_coef, args.clip_coef
                        )
                        value_error = torch.max(value_error, (clipped - b_returns[mb]).pow(2))
                    v_loss = 0.5 * value_error.mean()
                    entropy = (log_std + 0.5 * (1.0 + LOG_2PI)).sum()
                    loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss

                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                    optimizer.step()
                if args.target_kl is not None and approx_kl.item() > args.target_kl:
                    break
            check_finite(params, f"env step {global_step}")
            learn_seconds += time.perf_counter() - t0

            var_returns = np.var(returns)
            explained = np.nan if var_returns == 0 else 1 - np.var(returns - values) / var_returns
            wall = time.perf_counter() - start_time - run.eval_seconds
            sps = global_step / wall
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
            writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy.item(), global_step)
            writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
            writer.add_scalar("losses/clipfrac", np.mean(clipfracs), global_step)
            writer.add_scalar("losses/explained_variance", explained, global_step)
            writer.add_scalar("charts/action_std", torch.exp(log_std).mean().item(), global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            writer.add_scalar("time/env_seconds", env_seconds, global_step)
            writer.add_scalar("time/learn_seconds", learn_seconds, global_step)
            writer.add_scalar("time/train_seconds", wall, global_step)
            for tag, value in curriculum_scalars(curriculum).items():
                writer.add_scalar(tag, value, global_step)
            if progress.due(global_step):
                print(
                    f"step {global_step} | {recent_episodes(recent_success, recent_return)} | "
                    f"SPS {sps:.0f} | env {env_seconds:.0f}s learn {learn_seconds:.0f}s | "
                    f"v_loss {v_loss.item():.4f} kl {approx_kl.item():.4f} "
                    f"std {torch.exp(log_std).mean().item():.3f} | "
                    f"{progress.left(global_step, sps)}"
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
    return run.finish(report, global_step, seconds, tally, agent_steps)


if __name__ == "__main__":
    run_cli(train, Args, "python -m gameon.baselines.ppo", check_args, make_training_curriculum)
