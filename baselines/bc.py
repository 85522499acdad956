"""Behaviour cloning with action chunks: regress the dataset's next actions from each observation.

    python -m gameon.baselines.datasets --env-id GameOn/Stack-v0 --episodes-per-skill 200 \
        --dataset-id gameon/stack-expert-v0
    python -m gameon.baselines.bc --dataset-id gameon/stack-expert-v0 --num-updates 20000

Reads a Minari dataset written by `gameon.baselines.datasets` (or the experimenter's embodiment),
normalises observations with the dataset's statistics and trains `ChunkedActor` by
minibatch Adam: from the observation at step t it predicts the actions of steps t .. t +
chunk_length - 1 of the same segment (ACT, Zhao et al. 2023). Losses: mean squared error on the
continuous dims (vx, vy, vz, yaw; tanh-squashed) and, with `binary_gripper`, binary cross-entropy
of the gripper logit against "closed" (action > 0); both masked beyond the segment's end (a chunk
never crosses into the next skill or episode). At evaluation `ChunkingPolicy` averages the
predictions of the last chunk_length chunks for the current step (temporal ensembling). With
`--chunk-length 1 --no-binary-gripper` this is plain BC of a deterministic tanh actor (MSE).

Evaluates on the dataset's env with the shared suite (`gameon.evaluation`) and writes, under
`run_dir`: TensorBoard logs, `checkpoint.pt`, `eval.json`, `summary.json` and, with
`--capture-video`, one evaluation MP4 per skill in `videos/`. Each evaluation of `--eval-every`
writes `checkpoint.pt` (its update in the extra) and `eval.json` (its `update` field, as the
final one's) too, so that a run stopped by Ctrl-C keeps the last one; a run does not resume.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from gameon.baselines import common
from gameon.baselines.datasets import chunk_indices

ALGO = "bc"


@dataclass
class Args(common.OfflineArgs):
    """BC's settings: the budget and the algorithm's, after the shared ones."""

    num_updates: int = 50_000
    """gradient steps"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    success_only: bool = False
    """train only on transitions of successful segments (for data that holds failures)"""
    print_every: int = 5_000
    """print a progress line (losses, updates/s, time left) every this many updates (0: none)"""


def check_args(args: Args) -> None:
    """Reject an invalid setting with a ValueError naming it: the shared ones of OfflineArgs and
    a learning rate torch would refuse (0 is taken: it evaluates a warm start unchanged)."""
    common.check_offline_args(args)
    if not (args.learning_rate >= 0 and math.isfinite(args.learning_rate)):
        raise ValueError(
            f"learning_rate must be >= 0 (0: the --init-checkpoint's actor unchanged), got "
            f"{args.learning_rate}"
        )


def train(args: Args) -> dict:
    """Train behaviour cloning on a dataset, evaluate it and write the run's files. A setting that
    cannot work, or a run_dir holding an earlier run, is a ValueError before any training; Ctrl-C
    closes the logs and says what the run folder keeps (`OfflineRun.interrupted`), then raises."""
    check_args(args)
    run = common.start_offline_run(ALGO, args, success_only=args.success_only)
    data, device, writer = run.data, run.device, run.writer
    actor, normalizer = run.actor, run.normalizer
    observations = torch.as_tensor(normalizer(data.observations), device=device)
    actions = torch.as_tensor(data.actions, device=device)
    # chunk targets: rows t .. t + chunk_length - 1 of t's segment, masked past its end
    rows, masks = chunk_indices(data.segments, args.chunk_length)
    rows, masks = torch.as_tensor(rows, device=device), torch.as_tensor(masks, device=device)
    regressed = slice(0, -1) if args.binary_gripper else slice(None)  # the gripper has its BCE
    optimizer = torch.optim.Adam(actor.parameters(), lr=args.learning_rate)
    rng = np.random.default_rng(args.seed)
    print(
        f"{ALGO}: {data.size} transitions from {data.num_episodes} episodes "
        f"({data.num_segments} segments) of {data.env_id}"
    )

    losses: dict[str, float] = {}
    update = 0
    start = time.perf_counter()
    try:
        for update in range(1, args.num_updates + 1):
            batch = torch.as_tensor(rng.integers(0, data.size, args.batch_size), device=device)
            predicted = actor(observations[batch])  # (batch, chunk_length, action_size)
            target, mask = actions[rows[batch]], masks[batch].float()
            valid = mask.sum()
            squared = ((predicted[..., regressed] - target[..., regressed]) ** 2).mean(-1)
            continuous_loss = (squared * mask).sum() / valid
            if args.binary_gripper:
                closed = (target[..., -1] > 0).float()
                cross_entropy = F.binary_cross_entropy_with_logits(
                    predicted[..., -1], closed, reduction="none"
                )
                gripper_loss = (cross_entropy * mask).sum() / valid
            else:
                gripper_loss = torch.zeros((), device=device)
            loss_t = continuous_loss + gripper_loss
            optimizer.zero_grad()
            loss_t.backward()
            optimizer.step()

            if update % args.log_every == 0 or update == args.num_updates:
                losses = {
                    "actor_loss": loss_t.item(),
                    "continuous_loss": continuous_loss.item(),
                    "gripper_loss": gripper_loss.item(),
                }
                for name, value in losses.items():
                    writer.add_scalar(f"losses/{name}", value, update)
                elapsed = time.perf_counter() - start - run.eval_seconds
                writer.add_scalar("charts/updates_per_s", update / elapsed, update)
            run.print_progress(
                update, start, {"continuous loss": continuous_loss, "gripper loss": gripper_loss}
            )
            if run.evaluation_due(update):
                report = run.evaluate(actor, normalizer, update)
                print(
                    f"update {update}: continuous loss {continuous_loss.item():.4f}, gripper loss "
                    f"{gripper_loss.item():.4f}, eval success {report.success_rate:.2f}"
                )
        train_time = time.perf_counter() - start - run.eval_seconds
        return run.finish(
            actor,
            normalizer,
            report,
            losses,
            train_time,
            {},
            final_loss=losses["actor_loss"],
            success_only=args.success_only,
        )
    except (KeyboardInterrupt, common.TrainingDiverged) as stop:
        run.interrupted(update, stop)
        raise


if __name__ == "__main__":
    common.run_cli(train, Args, "python -m gameon.baselines.bc", check_args)
