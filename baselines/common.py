"""What the learners share besides the policy format (`gameon.policy`): seeding, the run folder,
training episodes per skill, the final evaluation and checkpoint, and the training curriculum
and env options of the online learners.

One file per algorithm stays readable top to bottom; only the plumbing around run folders,
evaluation and checkpoints that every learner repeats lives here.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from gameon.envs.language import parse
from gameon.evaluation import EvalReport, evaluate, evaluation_suite
from gameon.experimenter.curricula import check_curriculum_settings, curriculum_for_env
from gameon.experimenter.curriculum import Curriculum, Outcome, save_curriculum
from gameon.experimenter.curriculum_wrapper import make_curriculum_vec_env
from gameon.policy import Actor, ChunkedActor, Normalizer, Policy, make_policy, save_checkpoint

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


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


def make_training_envs(
    args: Any, curriculum: Curriculum, wrapper: Callable[[gym.Env], gym.Env] | None = None
) -> gym.vector.VectorEnv:
    """Vector envs whose episodes the curriculum picks, reset within the same step (SAME_STEP);
    each env wrapped in `wrapper` if given (e.g. coded actions)."""
    options = training_env_options(args)
    if wrapper is not None:
        options["wrappers"] = [wrapper]
    return make_curriculum_vec_env(
        args.env_id, args.num_envs, curriculum, vectorization_mode=args.vectorization, **options
    )


CURRICULUM_TASKS = ("all", "targets")
"""What an online curriculum's tasks are: every instruction the env accepts, or its targets'."""


def check_curriculum_args(args: Any) -> None:
    """Reject curriculum settings of an online learner's Args that cannot work together."""
    settings = ("vlm_model", "vlm_base_url", "vlm_replay", "hand_curriculum")
    check_curriculum_settings(args.curriculum, {name: getattr(args, name) for name in settings})
    if args.curriculum_tasks not in CURRICULUM_TASKS:
        raise ValueError(
            f"unknown curriculum_tasks {args.curriculum_tasks!r}; accepted: all, targets"
        )
    if args.vlm_interval < 1:
        raise ValueError(f"vlm_interval must be >= 1 episodes, got {args.vlm_interval}")
