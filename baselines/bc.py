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
`--capture-video`, one evaluation MP4 per skill in `videos/`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter

from gameon.baselines import common
from gameon.baselines.datasets import (
    check_compatible,
    chunk_indices,
    default_datasets_path,
    load,
    observation_normalizer,
    write_json,
)
from gameon.evaluation import format_table
from gameon.policy import (
    ChunkedActor,
    check_env_id,
    make_policy,
    save_checkpoint,
    warm_start,
)

ALGO = "bc"


@dataclass
class Args:
    dataset_id: str = "gameon/multiskill-expert-v0"
    """Minari dataset to learn from (written by `gameon.baselines.datasets`)"""
    datasets_path: str = field(default_factory=default_datasets_path)
    """root folder of the Minari datasets ($MINARI_DATASETS_PATH if set, else ./datasets)"""
    env_id: str | None = None
    """env to evaluate on (default: the dataset's env); its spaces must match the dataset's"""
    seed: int = 1
    """seed of the network initialisation and the minibatches"""
    torch_deterministic: bool = True
    """set `torch.backends.cudnn.deterministic`"""
    torch_threads: int = 1
    """torch intra-op threads for training"""
    cuda: bool = False
    """train on the GPU if one is available (evaluation always runs on the CPU)"""
    num_updates: int = 50_000
    """gradient steps"""
    batch_size: int = 256
    """transitions per minibatch"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    hidden: tuple[int, ...] = (256, 256)
    """hidden layer widths of the actor"""
    chunk_length: int = 8
    """actions predicted per observation (the action chunk; 1: one action, plain BC)"""
    ensemble_decay: float = -0.1
    """temporal ensembling weight exp(-ensemble_decay * i), i = 0 for the oldest chunk's
    prediction of the current step (> 0 favours older predictions, as ACT's 0.01; < 0 newer).
    On Stack-v0 (chunks of 8) -0.2 to -0.05 beat 0 and 0.01 by 5-8 points of success"""
    binary_gripper: bool = True
    """predict the gripper as a logit of "closed" (BCE loss; acts -1 or +1), not by regression"""
    success_only: bool = False
    """train only on transitions of successful segments (for data that holds failures)"""
    log_every: int = 1_000
    """write training losses to TensorBoard every this many updates"""
    eval_every: int = 0
    """evaluate every this many updates as well as at the end (0: only at the end)"""
    eval_episodes_per_skill: int = 10
    """episodes per skill of the evaluation suite"""
    capture_video: bool = False
    """after the final evaluation, record one evaluation episode per skill to run_dir/videos"""
    init_checkpoint: str | None = None
    """start from this checkpoint's actor and normaliser (continued training, as the collect
    loop's iterations do); its architecture must match this run's"""
    run_dir: str | None = None
    """output folder (default: runs/{algo}__{dataset}__{seed}__{timestamp})"""


def train(args: Args) -> dict:
    """Train behaviour cloning on a dataset, evaluate it and write the run's files."""
    for name in (
        "num_updates",
        "batch_size",
        "log_every",
        "eval_episodes_per_skill",
        "chunk_length",
    ):
        if getattr(args, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(args, name)}")
    torch.set_num_threads(args.torch_threads)
    common.seed_everything(args.seed, args.torch_deterministic)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    data = load(args.dataset_id, args.datasets_path)
    env_id = args.env_id or data.env_id
    check_env_id(env_id)
    env = gym.make(env_id)
    check_compatible(data, env)
    env.close()

    timestamp = time.strftime("%Y%m%d-%H%M%S")
    run_name = f"{ALGO}__{args.dataset_id.replace('/', '-')}__{args.seed}__{timestamp}"
    run_dir = Path(args.run_dir or Path("runs") / run_name)
    run_dir.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(str(run_dir))
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items()),
    )

    if args.success_only:
        data = data.subset(data.segment_success)
        if data.size == 0:
            raise ValueError(f"dataset {args.dataset_id} has no successful segment to learn from")
    actor = ChunkedActor(
        data.obs_size,
        data.action_size,
        args.hidden,
        chunk_length=args.chunk_length,
        binary_gripper=args.binary_gripper,
        ensemble_decay=args.ensemble_decay,
    ).to(device)
    normalizer = observation_normalizer(data)
    if args.init_checkpoint is not None:
        normalizer = warm_start(actor, args.init_checkpoint)
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

    evaluations, losses, eval_time = [], {}, 0.0
    start = time.perf_counter()
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
            elapsed = time.perf_counter() - start - eval_time
            writer.add_scalar("charts/updates_per_s", update / elapsed, update)
        if (args.eval_every > 0 and update % args.eval_every == 0) or update == args.num_updates:
            eval_start = time.perf_counter()
            report = common.evaluate_actor(
                actor, normalizer, env_id, args.eval_episodes_per_skill, args.torch_threads
            )
            evaluation = report.to_dict()
            eval_time += time.perf_counter() - eval_start
            writer.add_scalar("eval/success_rate", report.success_rate, update)
            for skill, skill_rate in report.rates().items():
                writer.add_scalar(f"eval/success_rate/{skill}", skill_rate, update)
            evaluations.append(report.curve_point(update=update))
            rate = report.success_rate
            print(
                f"update {update}: continuous loss {continuous_loss.item():.4f}, gripper loss "
                f"{gripper_loss.item():.4f}, eval success {rate:.2f}"
            )
    train_time = time.perf_counter() - start - eval_time

    actor = actor.cpu().eval()
    checkpoint = save_checkpoint(
        run_dir / "checkpoint.pt",
        ALGO,
        env_id,
        actor,
        normalizer,
        asdict(args),
        extra={"dataset_id": args.dataset_id, "num_updates": args.num_updates},
    )
    write_json(run_dir / "eval.json", evaluation)
    videos = []
    if args.capture_video:
        videos = common.record_videos(make_policy(actor, normalizer), env_id, run_dir)
        torch.set_num_threads(args.torch_threads)
    writer.close()

    summary = {
        "algo": ALGO,
        "dataset_id": args.dataset_id,
        "env_id": env_id,
        "seed": args.seed,
        "run_dir": str(run_dir),
        "updates": args.num_updates,
        "transitions": data.size,
        "episodes": data.num_episodes,
        "final_loss": losses["actor_loss"],
        "final_losses": losses,
        "segments": data.num_segments,
        "chunk_length": args.chunk_length,
        "ensemble_decay": args.ensemble_decay,
        "binary_gripper": args.binary_gripper,
        "success_only": args.success_only,
        "updates_per_s": args.num_updates / train_time,
        "train_seconds": train_time,
        "eval_seconds": eval_time,
        "eval": {**evaluation, "update": args.num_updates},
        "evals": evaluations,
        "checkpoint": str(checkpoint),
        "videos": videos,
        "args": asdict(args),
    }
    write_json(run_dir / "summary.json", summary)
    print(format_table(evaluation))
    return summary


if __name__ == "__main__":
    train(tyro.cli(Args, prog="python -m gameon.baselines.bc"))
