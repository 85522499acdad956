"""Implicit Q-learning (Kostrikov et al., 2021), CORL-style, with a deterministic tanh actor.

    python -m gameon.baselines.datasets --env-id GameOn/Lift-v0 --episodes-per-skill 200 \
        --noise-levels 0.0 0.3 --failed-fraction 0.3 --dataset-id gameon/lift-mixed-v0
    python -m gameon.baselines.iql --dataset-id gameon/lift-mixed-v0

Three losses per update, on one minibatch of dataset transitions (s, a, r, s', terminal):

- value: expectile regression of V(s) towards min(Q1, Q2)(s, a) of the target critics,
  L = |expectile - 1(u < 0)| u^2 with u = Q(s, a) - V(s); expectile > 0.5 leans to the best
  actions in the data without ever querying actions outside it;
- critics: Q1, Q2(s, a) regress r + discount (1 - terminal) V(s'); the target critics follow
  by Polyak averaging;
- actor: advantage-weighted regression, weight exp(beta (Q(s, a) - V(s))) clipped at
  `max_weight`, of a `ChunkedActor`: from s_t it predicts the chunk a_t .. a_{t+k-1}
  (k = chunk_length) of t's segment; its loss is the squared error of the continuous dims plus,
  with `binary_gripper`, the gripper logit's binary cross-entropy, masked beyond the segment's
  end and weighted by the advantage of (s_t, a_t). The critics and the value stay on single
  actions. With `--chunk-length 1 --no-binary-gripper` the actor is the deterministic tanh actor
  of plain IQL with a squared error. At evaluation `ChunkingPolicy` ensembles the chunks
  (see `gameon.baselines.bc`).

Observations are normalised with the dataset's statistics. Outputs as for `gameon.baselines.bc`:
TensorBoard logs, `checkpoint.pt` (with the critics and the value network in its extra),
`eval.json`, `summary.json` and optional MP4s under `run_dir`, the checkpoint and eval.json also
at each evaluation of `--eval-every`.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gameon.baselines import common
from gameon.baselines.datasets import chunk_indices

ALGO = "iql"


@dataclass
class Args(common.OfflineArgs):
    """IQL's settings: the budget and the algorithm's, after the shared ones."""

    num_updates: int = 100_000
    """gradient steps (each updates value, critics and actor once)"""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor (cosine-annealed to 0 over `num_updates`)"""
    critic_lr: float = 3e-4
    """Adam learning rate of the twin critics"""
    value_lr: float = 3e-4
    """Adam learning rate of the value network"""
    discount: float = 0.99
    """discount factor gamma"""
    polyak: float = 0.005
    """target critics move this fraction towards the critics each update"""
    expectile: float = 0.7
    """expectile tau of the value regression (0.5: mean, like SARSA; towards 1: max)"""
    beta: float = 3.0
    """inverse temperature of the advantage weights exp(beta * A)"""
    max_weight: float = 100.0
    """clip of the advantage weights"""
    reward_scale: float = 1.0
    """rewards are used as reward_scale * r + reward_bias"""
    reward_bias: float = 0.0
    """see reward_scale (e.g. -1 with sparse success rewards gives a cost per step)"""
    print_every: int = 5_000
    """print a progress line (losses, updates/s, time left) every this many updates (0: none)"""


def check_args(args: Args) -> None:
    """Reject an invalid setting with a ValueError naming it: the shared ones of OfflineArgs, a
    learning rate torch would refuse, a discount, polyak or expectile out of its range, an
    advantage weighting or reward transform that is not a finite number (NaN fails every check:
    it would surface only as NaN actions at the first evaluation, after the whole budget)."""
    common.check_offline_args(args)
    for name in ("actor_lr", "critic_lr", "value_lr"):
        common.check_rate(name, getattr(args, name))
    if not 0.0 <= args.discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {args.discount}")
    if not 0.0 < args.polyak <= 1.0:
        raise ValueError(f"polyak must be in (0, 1], got {args.polyak}")
    if not 0.0 < args.expectile < 1.0:
        raise ValueError(f"expectile must be in (0, 1), got {args.expectile}")
    if not (args.beta >= 0 and math.isfinite(args.beta)):
        raise ValueError(f"beta must be >= 0 (0: plain BC), got {args.beta}")
    common.check_rate("max_weight", args.max_weight)
    for name in ("reward_scale", "reward_bias"):
        if not math.isfinite(getattr(args, name)):
            raise ValueError(f"{name} must be a finite number, got {getattr(args, name)}")


def mlp(in_size: int, out_size: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """A ReLU multilayer perceptron."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_size, width), nn.ReLU()]
        in_size = width
    layers.append(nn.Linear(in_size, out_size))
    return nn.Sequential(*layers)


class TwinQ(nn.Module):
    """Two independent critics Q1, Q2(s, a)."""

    def __init__(self, obs_size: int, action_size: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.q1 = mlp(obs_size + action_size, 1, hidden)
        self.q2 = mlp(obs_size + action_size, 1, hidden)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = torch.cat((obs, action), dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Asymmetric squared loss |expectile - 1(diff < 0)| diff^2, averaged."""
    weight = torch.abs(expectile - (diff < 0).float())
    return (weight * diff**2).mean()


def critics(critic: TwinQ, value: nn.Sequential) -> dict[str, dict[str, torch.Tensor]]:
    """CPU copies of the critics' and the value network's weights, for the checkpoint's extra
    (the networks themselves stay on the training device)."""
    return {
        "critic": copy.deepcopy(critic).cpu().state_dict(),
        "value": copy.deepcopy(value).cpu().state_dict(),
    }


def train(args: Args) -> dict:
    """Train IQL on a dataset, evaluate it and write the run's files. A setting that cannot work,
    or a run_dir holding an earlier run, is a ValueError before any training; Ctrl-C closes the
    logs and says what the run folder keeps (`OfflineRun.interrupted`), then raises."""
    check_args(args)
    run = common.start_offline_run(ALGO, args)
    data, device, writer = run.data, run.device, run.writer
    actor, normalizer = run.actor, run.normalizer  # critics and value always start afresh
    observations = torch.as_tensor(normalizer(data.observations), device=device)
    next_observations = torch.as_tensor(normalizer(data.next_observations), device=device)
    actions = torch.as_tensor(data.actions, device=device)
    rewards = torch.as_tensor(data.rewards * args.reward_scale + args.reward_bias, device=device)
    not_done = torch.as_tensor(1.0 - data.terminals.astype(np.float32), device=device)
    # the actor's chunk targets: rows t .. t + chunk_length - 1 of t's segment, masked past its end
    rows, masks = chunk_indices(data.segments, args.chunk_length)
    rows, masks = torch.as_tensor(rows, device=device), torch.as_tensor(masks, device=device)

    regressed = slice(0, -1) if args.binary_gripper else slice(None)  # the gripper has its BCE
    critic = TwinQ(data.obs_size, data.action_size, args.hidden).to(device)
    target_critic = copy.deepcopy(critic).requires_grad_(False)
    value = mlp(data.obs_size, 1, args.hidden).to(device)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.actor_lr)
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=args.critic_lr)
    value_optimizer = torch.optim.Adam(value.parameters(), lr=args.value_lr)
    actor_schedule = torch.optim.lr_scheduler.CosineAnnealingLR(actor_optimizer, args.num_updates)
    rng = np.random.default_rng(args.seed)
    print(f"{ALGO}: {data.size} transitions from {data.num_episodes} episodes of {data.env_id}")

    losses: dict[str, float] = {}
    update = 0
    start = time.perf_counter()
    try:
        for update in range(1, args.num_updates + 1):
            batch = torch.as_tensor(rng.integers(0, data.size, args.batch_size), device=device)
            obs, action, next_obs = observations[batch], actions[batch], next_observations[batch]

            # value: expectile of the target critics' Q over the dataset's actions
            with torch.no_grad():
                target_q = torch.min(*target_critic(obs, action))
            v = value(obs).squeeze(-1)
            advantage = target_q - v
            value_loss = expectile_loss(advantage, args.expectile)
            value_optimizer.zero_grad()
            value_loss.backward()
            value_optimizer.step()

            # critics: one-step targets bootstrapped from V(s'), never from an actor's action
            with torch.no_grad():
                next_v = value(next_obs).squeeze(-1)
                q_target = rewards[batch] + args.discount * not_done[batch] * next_v
            q1, q2 = critic(obs, action)
            critic_loss = (F.mse_loss(q1, q_target) + F.mse_loss(q2, q_target)) / 2
            critic_optimizer.zero_grad()
            critic_loss.backward()
            critic_optimizer.step()
            with torch.no_grad():
                for param, target_param in zip(
                    critic.parameters(), target_critic.parameters(), strict=True
                ):
                    target_param.lerp_(param, args.polyak)

            # actor: advantage-weighted regression onto the dataset's chunk of actions from s
            weights = torch.exp(args.beta * advantage.detach()).clamp(max=args.max_weight)
            predicted = actor(obs)  # (batch, chunk_length, action_size)
            target, mask = actions[rows[batch]], masks[batch].float()
            squared_error = ((predicted[..., regressed] - target[..., regressed]) ** 2).sum(-1)
            cross_entropy = torch.zeros_like(squared_error)
            if args.binary_gripper:
                closed = (target[..., -1] > 0).float()
                cross_entropy = F.binary_cross_entropy_with_logits(
                    predicted[..., -1], closed, reduction="none"
                )
            valid = mask.sum()
            actor_loss = (weights[:, None] * (squared_error + cross_entropy) * mask).sum() / valid
            continuous_loss = (squared_error.detach() * mask).sum() / valid  # logged, unweighted
            gripper_loss = (cross_entropy.detach() * mask).sum() / valid
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
            actor_schedule.step()

            if update % args.log_every == 0 or update == args.num_updates:
                losses = {
                    "value_loss": value_loss.item(),
                    "critic_loss": critic_loss.item(),
                    "actor_loss": actor_loss.item(),
                    "continuous_loss": continuous_loss.item(),
                    "gripper_loss": gripper_loss.item(),
                }
                for name, loss in losses.items():
                    writer.add_scalar(f"losses/{name}", loss, update)
                writer.add_scalar("values/q", q1.mean().item(), update)
                writer.add_scalar("values/v", v.mean().item(), update)
                writer.add_scalar("values/advantage", advantage.mean().item(), update)
                writer.add_scalar("values/weight", weights.mean().item(), update)
                clipped = (weights >= args.max_weight).float().mean().item()
                writer.add_scalar("values/weight_clipped_fraction", clipped, update)
                writer.add_scalar("charts/actor_lr", actor_schedule.get_last_lr()[0], update)
                elapsed = time.perf_counter() - start - run.eval_seconds
                writer.add_scalar("charts/updates_per_s", update / elapsed, update)
            run.print_progress(
                update, start, {"value": value_loss, "critic": critic_loss, "actor": actor_loss}
            )
            if run.evaluation_due(update):
                report = run.evaluate(actor, normalizer, update, lambda: critics(critic, value))
                print(
                    f"update {update}: value {value_loss.item():.4f}, critic "
                    f"{critic_loss.item():.4f}, actor {actor_loss.item():.4f} (continuous "
                    f"{continuous_loss.item():.4f}, gripper {gripper_loss.item():.4f}), "
                    f"eval success {report.success_rate:.2f}"
                )
        train_time = time.perf_counter() - start - run.eval_seconds
        return run.finish(actor, normalizer, report, losses, train_time, critics(critic, value))
    except (KeyboardInterrupt, common.TrainingDiverged) as stop:
        run.interrupted(update, stop)
        raise


if __name__ == "__main__":
    common.run_cli(train, Args, "python -m gameon.baselines.iql", check_args)
