"""What the learners share besides the policy format (`gameon.policy`): the Args fields of the
online learners (`OnlineArgs`) and of the offline ones (`OfflineArgs`), seeding, the run as it
starts (run folder, TensorBoard, curriculum and envs or dataset) and ends (evaluation,
checkpoint, summary), the training curriculum and env options of the online learners, and the
command line (`run_cli`: a setting the checks refuse, or inputs that do not fit, are one line and
exit 2, before anything is written).

One file per algorithm stays readable top to bottom with its algorithm in view: its Args add the
algorithm's fields to the shared ones, and only the plumbing around run folders, evaluation and
checkpoints that every learner repeats lives here.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import gymnasium as gym
import numpy as np
import torch
import tyro

from gameon.atomic import check_writable, defer_signals
from gameon.baselines.datasets import (
    check_compatible,
    check_dataset_exists,
    default_datasets_path,
    load,
    observation_normalizer,
    write_json,
)
from gameon.baselines.usage import usage_message
from gameon.envs.language import parse
from gameon.envs.stacking_env import REWARD_MODES
from gameon.evaluation import EvalReport, evaluate, evaluation_suite, format_table
from gameon.experimenter.coded_actions import (
    DEFAULT_MAX_SKILL_STEPS,
    coded_wrapper,
    load_coded_skills,
)
from gameon.experimenter.curricula import (
    ONLINE_CURRICULA,
    check_curriculum_settings,
    curriculum_for_env,
)
from gameon.experimenter.curriculum import (
    Curriculum,
    Outcome,
    curriculum_brief,
    curriculum_label,
    save_curriculum,
    vlm_usage,
)
from gameon.experimenter.curriculum_wrapper import make_curriculum_vec_env
from gameon.experimenter.vlm.backend import TRANSCRIPT_FILE, VLMRefused
from gameon.experimenter.vlm.factory import check_transport, vlm_line
from gameon.extras import installed
from gameon.policy import (
    Actor,
    ChunkedActor,
    Normalizer,
    Policy,
    check_env_id,
    make_policy,
    save_checkpoint,
    warm_start,
)
from gameon.records import VLMUsage

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

VECTORIZATIONS = ("shared", "sync", "async")
ArgsT = TypeVar("ArgsT")


@dataclass
class OnlineArgs:
    """The Args fields PPO and SAC share: the vector env, the curriculum and its VLM, evaluation,
    logging and coded actions. Each learner's Args adds its env, budget and algorithm."""

    seed: int = 1
    """seed of the run (torch, numpy, envs, and SAC's replay sampling)"""
    num_envs: int = 2
    """parallel envs"""
    vectorization: Literal["shared", "sync", "async"] = "shared"
    """vector env: shared (gameon.envs.make_vec: this process and one worker per further CPU
    each step a slice of the envs, through shared memory; the same results as sync, bit for bit),
    or gymnasium's sync (one process) or async (one process per env)"""
    terminate_on_success: bool | None = None
    """end training episodes at success; None: only with sparse reward (see the module doc)"""
    max_episode_steps: int | None = None
    """step limit of training episodes; None: the env's own (evaluation always uses the env's)"""
    curriculum: str = "fixed"
    """who picks each training episode's instruction: fixed (uniform over the tasks), hand (the
    stages of hand_curriculum; the shipped ones need GameOn/MultiSkill-v0), lp (learning
    progress), vlm (a VLM proposes the tasks every vlm_interval episodes; results labelled
    vlm[{vlm_backend}]) or positive_control (the weakest evaluated skill of the target's
    prerequisite chain; the env must have every skill of the chain). negative_control is refused
    here: every env's target needs all the skills it has (`gameon experiment` runs it)"""
    curriculum_tasks: Literal["all", "targets"] = "all"
    """the tasks of fixed and lp, and what hand's stages must stay within: all (every instruction
    the env accepts: its skills over its block colours) or targets (only the skills the env is
    evaluated on); every registered env is evaluated on all its skills, so today they agree"""
    hand_curriculum: str | None = None
    """TOML file of the hand curriculum's stages; None: the shipped reach -> ... -> tower"""
    curriculum_seed: int | None = None
    """seed of the curriculum's proposals; None: the run seed"""
    vlm_backend: str = "rules"
    """vlm curriculum: rules (offline stand-in) | gemini | openai | replay"""
    vlm_model: str | None = None
    """vlm curriculum: the model (default gemini-2.5-flash for gemini, gpt-4o-mini for openai)"""
    vlm_base_url: str | None = None
    """vlm curriculum: server URL, e.g. http://localhost:11434/v1 for Ollama (openai backend)"""
    vlm_timeout: float | None = None
    """vlm curriculum, gemini and openai: seconds of waiting with nothing from the server (to
    connect, or between parts of its answer) before a request is retried (None: 30)"""
    vlm_retries: int | None = None
    """vlm curriculum, gemini and openai: retries of a request that failed in transport (None: 3)"""
    vlm_replay: str | None = None
    """vlm curriculum, replay backend: the transcript.jsonl (or run folder) to replay"""
    vlm_interval: int = 100
    """vlm curriculum: training episodes between consultations of the model"""
    torch_deterministic: bool = True
    """sets torch.backends.cudnn.deterministic"""
    torch_threads: int = 1
    """torch intra-op threads (small MLPs run fastest single-threaded)"""
    run_dir: str | None = None
    """where logs, eval.json and checkpoint.pt go; default runs/{algo}__{env}__{seed}__{time}"""
    eval_episodes_per_skill: int = 10
    """evaluation suite size per skill (shared protocol of gameon.evaluation)"""
    eval_every: int = 0
    """evaluate and checkpoint every this many env steps; 0: only at the end"""
    capture_video: bool = False
    """write an MP4 of each evaluation to run_dir/videos/"""
    track: bool = False
    """log to Weights & Biases (needs wandb installed)"""
    wandb_project_name: str = "gameon-rl"
    """W&B project"""
    wandb_entity: str | None = None
    """W&B entity (team); None: your default"""
    coded_skills: str | None = None
    """coded actions (RL-GPT): "templates" (coded_api.TEMPLATES) or a skill-library JSON whose
    coded skills each add an action dim that runs the skill when its score is the largest and > 0
    (see experimenter.coded_actions); None: off"""
    coded_max_steps: int = DEFAULT_MAX_SKILL_STEPS
    """with coded_skills: env steps one coded action may take"""


@dataclass
class OfflineArgs:
    """The Args fields BC and IQL share: the dataset, the chunked actor, evaluation and logging.
    Each learner's Args adds its budget and algorithm."""

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
    batch_size: int = 256
    """transitions per minibatch"""
    hidden: tuple[int, ...] = (256, 256)
    """hidden layer widths of the actor (and of IQL's critics and value network)"""
    chunk_length: int = 8
    """actions the actor predicts per observation (the action chunk; 1: one action, plain BC)"""
    ensemble_decay: float = -0.1
    """temporal ensembling weight exp(-ensemble_decay * i), i = 0 for the oldest chunk's
    prediction of the current step (> 0 favours older predictions, as ACT's 0.01; < 0 newer).
    On Stack-v0 (chunks of 8) -0.2 to -0.05 beat 0 and 0.01 by 5-8 points of success"""
    binary_gripper: bool = True
    """predict the gripper as a logit of "closed" (BCE loss; acts -1 or +1), not by regression"""
    log_every: int = 1_000
    """write training losses to TensorBoard every this many updates"""
    eval_every: int = 0
    """evaluate and checkpoint every this many updates as well as at the end (0: only at the
    end)"""
    eval_episodes_per_skill: int = 10
    """episodes per skill of the evaluation suite"""
    capture_video: bool = False
    """after the final evaluation, record one evaluation episode per skill to run_dir/videos"""
    init_checkpoint: str | None = None
    """start from this checkpoint's actor and normaliser (continued training, as the collect
    loop's iterations do); its architecture must match this run's"""
    run_dir: str | None = None
    """output folder (default: runs/{algo}__{dataset}__{seed}__{timestamp})"""


MAX_SEED = 2**32 - 1
"""numpy's global generator, which seed_everything seeds, takes seeds 0 to 2**32 - 1."""


def check_seed(name: str, seed: int | None) -> None:
    """ValueError unless `seed` is None or in 0 .. MAX_SEED (numpy would refuse it only once the
    run folder is made, with a traceback)."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ValueError(f"{name} must be in 0 .. 2**32 - 1 = {MAX_SEED}, got {seed}")


def check_rate(name: str, value: float) -> None:
    """ValueError unless `value` is a finite number > 0 (a learning rate torch would refuse only
    once the run folder is made, a temperature, a clip; NaN fails too)."""
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value}")


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


PROGRESS_SECONDS = 60.0
"""An online learner prints its progress line at least this often, besides every `print_every`
env steps: SAC learns at ~70-115 env steps/s here, so its default 10k steps between lines were
2-2.5 minutes of silence (many more with `updates_per_step` > 1)."""


class ProgressClock:
    """When an online learner prints its progress line: every `print_every` env steps, at the
    last step, and whenever PROGRESS_SECONDS passed since the line before (a slow run is never
    silent for minutes); `left` is the training time the run's pace leaves."""

    def __init__(self, print_every: int, total_timesteps: int) -> None:
        self.print_every = print_every
        self.total_timesteps = total_timesteps
        self.next_step = print_every
        self.last_line = time.perf_counter()

    def due(self, global_step: int) -> bool:
        """Whether to print a line at `global_step`; if so, the clock starts over from now."""
        now = time.perf_counter()
        by_steps = global_step >= self.next_step or global_step >= self.total_timesteps
        if not by_steps and now - self.last_line < PROGRESS_SECONDS:
            return False
        self.next_step = (global_step // self.print_every + 1) * self.print_every
        self.last_line = now
        return True

    def left(self, global_step: int, steps_per_second: float) -> str:
        """The training time left at this pace, e.g. "1234 s left" (evaluations not counted)."""
        seconds = max(self.total_timesteps - global_step, 0) / max(steps_per_second, 1e-9)
        return f"{seconds:.0f} s left"


def new_run_folder(name: str) -> Path:
    """Make and return runs/NAME, or runs/NAME_2, NAME_3, ... if it is taken: a run given no
    run_dir gets a folder of its own, even beside another started in the same second (a sweep
    started in the background), whose checkpoint it would otherwise overwrite."""
    Path("runs").mkdir(exist_ok=True)
    number = 1
    while True:
        folder = Path("runs") / (name if number == 1 else f"{name}_{number}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            number += 1


def writable_run_dir(run_dir: str | Path | None, new_folder: Callable[[], Path]) -> Path:
    """The run's folder, `run_dir` or else `new_folder()`, made and checked writable: RunRefused,
    naming it, where it cannot be (a file in its path, a read-only or system folder), so the
    learner stops in one line before anything is trained or logged."""
    try:
        folder = Path(run_dir) if run_dir is not None else new_folder()
        check_writable(folder)
    except OSError as error:
        where = run_dir if run_dir is not None else Path("runs")
        raise RunRefused(
            f"cannot write the run folder {where} ({error.strerror or error}): give another "
            "--run-dir, or run from a folder you can write"
        ) from None
    return folder


def default_run_dir(algo: str, name: str, seed: int) -> Path:
    """A new folder runs/{algo}__{name with / as _}__{seed}__{unix time}, as CleanRL names its
    runs (new_run_folder)."""
    return new_run_folder(f"{algo}__{name.replace('/', '_')}__{seed}__{int(time.time())}")


def log_evaluation(writer: SummaryWriter, report: EvalReport, step: int) -> None:
    """Log an evaluation's success rate, overall and per skill (eval/success_rate_{skill}), under
    the tags of every learner, so that online and offline runs line up in one TensorBoard."""
    writer.add_scalar("eval/success_rate", report.success_rate, step)
    for skill, rate in report.rates().items():
        writer.add_scalar(f"eval/success_rate_{skill}", rate, step)


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
        "timeout": args.vlm_timeout,
        "retries": args.vlm_retries,
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
    settings = (
        "vlm_model",
        "vlm_base_url",
        "vlm_timeout",
        "vlm_retries",
        "vlm_replay",
        "hand_curriculum",
    )
    check_curriculum_settings(
        args.curriculum,
        {name: getattr(args, name) for name in settings},
        accepted=ONLINE_CURRICULA,
    )
    if args.curriculum_tasks not in CURRICULUM_TASKS:
        raise ValueError(
            f"unknown curriculum_tasks {args.curriculum_tasks!r}; accepted: all, targets"
        )
    if args.vlm_interval < 1:
        raise ValueError(f"vlm_interval must be >= 1 episodes, got {args.vlm_interval}")
    check_transport(args.vlm_backend, args.vlm_timeout, args.vlm_retries)


def open_writer(run_dir: Path, args: Any) -> SummaryWriter:
    """The run's TensorBoard writer, the Args written first as a hyperparameter table."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir))
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n"
        + "\n".join(f"|{k}|{v}|" for k, v in dataclasses.asdict(args).items()),
    )
    return writer


def check_online_args(args: Any) -> None:
    """Reject what PPO's and SAC's Args (OnlineArgs and their env_id, reward_mode) share that
    cannot work: an unknown env id, reward mode
    or vector env, curriculum settings that do not go together, a step limit below 1, a negative
    seed (numpy would refuse it only once the run folder is made), W&B tracking without wandb."""
    check_env_id(args.env_id)
    for name in ("seed", "curriculum_seed"):
        check_seed(name, getattr(args, name))
    if args.track and not installed("wandb"):
        raise ValueError("track needs Weights & Biases: pip install wandb")
    if args.reward_mode not in REWARD_MODES:
        raise ValueError(f"unknown reward_mode {args.reward_mode!r}; accepted: sparse, dense")
    if args.vectorization not in VECTORIZATIONS:
        raise ValueError(
            f"unknown vectorization {args.vectorization!r}; accepted: {', '.join(VECTORIZATIONS)}"
        )
    check_curriculum_args(args)
    if args.max_episode_steps is not None and args.max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {args.max_episode_steps}")


@dataclass
class OnlineRun:
    """An online learner's run once started: its curriculum, training envs (wrapped in coded
    actions if asked), folder and TensorBoard writer; it evaluates and checkpoints the policy
    (`evaluate`) and writes the summary at the end (`finish`)."""

    algo: str
    args: Any
    curriculum: Curriculum
    coded_skills: dict | None
    env_wrapper: Callable[[gym.Env], gym.Env] | None
    envs: gym.vector.VectorEnv
    run_dir: Path
    writer: SummaryWriter
    wandb: Any = None
    planned_steps: int = 0
    """the env steps the run was started for (PPO rounds total_timesteps to whole rollouts)"""
    evals: list[dict] = field(default_factory=list)
    eval_seconds: float = 0.0
    saved_step: int | None = None
    """the env step whose eval.json, checkpoint.pt and curriculum.json the folder holds (None:
    none yet)"""

    def evaluate(
        self,
        actor: Actor,
        normalizer: Normalizer,
        global_step: int,
        on_eval: Callable[[Policy, EvalReport, int], None] | None,
    ) -> EvalReport:
        """Score the deterministic policy on the shared suite, timed, in an evaluation env wrapped
        as the training envs are (coded actions); tell the curriculum (`update_evaluation`),
        save the run's files (`save`), log and print the result, then call `on_eval`.
        `capture_video` writes an MP4 per evaluation to run_dir/videos/eval_{global_step}.mp4."""
        check_finite(actor.parameters(), f"env step {global_step}")
        start = time.perf_counter()
        args = self.args
        actor.eval()
        policy = make_policy(actor, normalizer)
        video = self.run_dir / "videos" / f"eval_{global_step}.mp4"
        report = evaluate(
            policy,
            args.env_id,
            episodes_per_skill=args.eval_episodes_per_skill,
            env_kwargs={"reward_mode": args.reward_mode},
            video=video if args.capture_video else None,
            wrapper=self.env_wrapper,
        )
        actor.train()
        torch.set_num_threads(args.torch_threads)
        self.curriculum.update_evaluation(
            [Outcome(e.instruction, e.success, e.episode_return) for e in report.episodes]
        )
        self.save(actor, normalizer, report, global_step)
        log_evaluation(self.writer, report, global_step)
        rates = ", ".join(f"{skill} {rate:.2f}" for skill, rate in report.rates().items())
        print(f"eval at step {global_step}: success {report.success_rate:.2f} ({rates})")
        if on_eval is not None:
            on_eval(policy, report, global_step)
        self.evals.append(report.curve_point(global_step=global_step))
        self.eval_seconds += time.perf_counter() - start
        return report

    def save(
        self, actor: Actor, normalizer: Normalizer, report: EvalReport, global_step: int
    ) -> None:
        """Write eval.json (the report and its global_step), checkpoint.pt (the Args whole; the
        step and the curriculum's state in its extra) and curriculum.json, each atomically and
        with Ctrl-C held back until all three are written (`defer_signals`), so that they always
        come from the same evaluation."""
        args = self.args
        with defer_signals():
            write_json(self.run_dir / "eval.json", {**report.to_dict(), "global_step": global_step})
            save_checkpoint(
                self.run_dir / "checkpoint.pt",
                self.algo,
                args.env_id,
                actor,
                normalizer,
                dataclasses.asdict(args),
                extra={"global_step": global_step, "curriculum": self.curriculum.state_dict()},
            )
            save_curriculum(self.run_dir / "curriculum.json", self.curriculum)
            self.saved_step = global_step

    def interrupted(self, global_step: int, stop: BaseException) -> None:
        """After Ctrl-C (or TrainingDiverged, `stop`): close the training envs and the logs (so
        TensorBoard keeps every point up to the interruption) and say on stderr, in one line, what
        the run folder keeps. A run does not resume, and its folder has no summary.json;
        checkpoint.pt and eval.json are there only if an evaluation (`eval_every`) finished before
        the interruption."""
        with contextlib.suppress(Exception):  # an env interrupted mid-step may refuse to close
            self.envs.close()
        self.writer.close()
        if self.wandb is not None:
            self.wandb.finish(exit_code=130)
        kept = "its TensorBoard logs"
        if self.saved_step is not None:
            kept += (
                f" and the checkpoint.pt and eval.json of the evaluation at step {self.saved_step}"
            )
        print(
            f"{stop_cause(stop)} at env step {global_step} of {self.planned_steps}: "
            f"{self.run_dir} keeps {kept}, but no summary.json; a run does not resume, so "
            "start it again with a new --run-dir",
            file=sys.stderr,
        )

    def finish(
        self,
        report: EvalReport,
        global_step: int,
        seconds: dict[str, float],
        tally: SkillTally,
        agent_steps: int,
        **algo_fields: Any,
    ) -> dict:
        """Write run_dir/summary.json and close the logs; return the summary. `seconds`: the
        train, env and learn seconds; `algo_fields`: the learner's own entries."""
        args = self.args
        summary = {
            "algo": self.algo,
            "env_id": args.env_id,
            "seed": args.seed,
            "run_dir": str(self.run_dir),
            "global_step": global_step,
            "sps": global_step / seconds["train_seconds"],
            **seconds,
            "eval_seconds": self.eval_seconds,
            **algo_fields,
            "curriculum": args.curriculum,
            "curriculum_state": curriculum_brief(self.curriculum),
            "curriculum_label": curriculum_label(self.curriculum),
            "vlm": vlm_usage(self.curriculum),
            "train_episodes": sum(tally.episodes.values()),
            "train_per_skill": tally.to_dict(),
            "eval": {**report.to_dict(), "global_step": global_step},
            "evals": self.evals,
            "checkpoint": str(self.run_dir / "checkpoint.pt"),
        }
        if self.coded_skills is not None:
            summary["coded_actions"] = {
                "skills": list(self.coded_skills),
                "max_skill_steps": args.coded_max_steps,
                "agent_steps": agent_steps,
            }
        write_json(self.run_dir / "summary.json", summary)
        if summary["vlm"]["backend"] is not None:
            print(vlm_line(VLMUsage(**summary["vlm"]), self.run_dir / TRANSCRIPT_FILE))
        self.writer.close()
        if self.wandb is not None:
            self.wandb.finish()
        return summary


def recent_episodes(successes: Sequence[float], returns: Sequence[float]) -> str:
    """A progress line's episode part: mean success and return of the recent episodes, or that
    none has ended yet (rather than nan)."""
    if not successes:
        return "no episode ended yet"
    return f"success {np.mean(successes):.2f} | return {np.mean(returns):.2f}"


def start_online_run(algo: str, args: Any, env_steps: int | None = None) -> OnlineRun:
    """Start an online learner's run from its checked Args: the curriculum (its transcript in the
    run folder), coded skills, torch threads and seeds, the run folder, W&B if tracked,
    TensorBoard with the hyperparameters, and the training envs. A run_dir holding an earlier run
    is refused first (`check_new_run_dir`). `env_steps`: what the run will train for, where the
    learner rounds total_timesteps (PPO's whole rollouts)."""
    check_new_run_dir(args)
    try:
        coded_skills = None if args.coded_skills is None else load_coded_skills(args.coded_skills)
    except (OSError, ValueError, RuntimeError) as error:  # a missing file, no sandbox here
        raise RunRefused(f"coded_skills {args.coded_skills}: {error}") from error
    curriculum = make_training_curriculum(args)
    wandb = None
    if args.track:
        try:
            import wandb
        except ImportError as error:
            raise ValueError("track=True needs Weights & Biases: pip install wandb") from error
    torch.set_num_threads(args.torch_threads)
    seed_everything(args.seed, args.torch_deterministic)
    run_dir = writable_run_dir(args.run_dir, lambda: default_run_dir(algo, args.env_id, args.seed))
    steps = args.total_timesteps if env_steps is None else env_steps
    rounded = (
        "" if steps == args.total_timesteps else " (total_timesteps rounded up to whole rollouts)"
    )
    print(f"{algo} on {args.env_id}, {steps} env steps{rounded}, run folder {run_dir}")
    if curriculum.keeps_transcript:
        curriculum = make_training_curriculum(args, run_dir)  # now with its transcript
    env_wrapper = None
    if coded_skills is not None:
        env_wrapper = coded_wrapper(coded_skills, args.coded_max_steps)
    # The envs (worker processes, seconds to start) before any log: a start that fails or is
    # stopped there leaves no TensorBoard file that would make the same run_dir refused.
    envs = make_training_envs(args, curriculum, env_wrapper)
    try:
        if wandb is not None:
            wandb.init(
                project=args.wandb_project_name,
                entity=args.wandb_entity,
                name=run_dir.name,
                config=dataclasses.asdict(args),
                dir=str(run_dir),
                sync_tensorboard=True,
            )
        writer = open_writer(run_dir, args)
    except BaseException:
        envs.close()
        raise
    return OnlineRun(
        algo, args, curriculum, coded_skills, env_wrapper, envs, run_dir, writer, wandb, steps
    )


MAX_ENSEMBLE_EXPONENT = 700.0
"""exp(700) is near float64's largest number: the ensembling weights exp(-ensemble_decay * i) over
a chunk must stay finite and above 0, or the actions become NaN."""


def check_offline_args(args: Any) -> None:
    """Reject what BC's and IQL's Args (OfflineArgs and their num_updates) share that cannot
    work: a count below 1, a seed numpy refuses, hidden widths below 1, an ensembling decay whose
    weights overflow, an unknown env id, a dataset that is not there."""
    counts = ("num_updates", "batch_size", "log_every", "eval_episodes_per_skill", "chunk_length")
    for name in counts:
        if getattr(args, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(args, name)}")
    check_seed("seed", args.seed)
    if args.eval_every < 0:
        raise ValueError(f"eval_every must be >= 0 (0: only at the end), got {args.eval_every}")
    if args.print_every < 0:
        raise ValueError(f"print_every must be >= 0 (0: no progress lines), got {args.print_every}")
    if not args.hidden or any(width < 1 for width in args.hidden):
        raise ValueError(f"hidden must be one or more widths >= 1, got {args.hidden}")
    span = abs(args.ensemble_decay) * (args.chunk_length - 1)
    if not span <= MAX_ENSEMBLE_EXPONENT:  # NaN too
        raise ValueError(
            f"ensemble_decay {args.ensemble_decay} over chunks of {args.chunk_length} gives "
            "ensembling weights exp(-ensemble_decay * i) that overflow: keep |ensemble_decay| * "
            f"(chunk_length - 1) <= {MAX_ENSEMBLE_EXPONENT:g} (the default is -0.1)"
        )
    if args.env_id is not None:
        check_env_id(args.env_id)
    check_dataset_exists(args.dataset_id, args.datasets_path)


@dataclass
class OfflineRun:
    """An offline learner's run once started: its dataset, the env it is evaluated on, the
    device, folder and TensorBoard writer, the actor and its normaliser; it evaluates and
    checkpoints the actor (`evaluate`), says what its folder keeps after Ctrl-C (`interrupted`)
    and writes the final checkpoint, eval.json and summary at the end (`finish`)."""

    algo: str
    args: Any
    data: Any
    env_id: str
    device: torch.device
    run_dir: Path
    writer: SummaryWriter
    actor: ChunkedActor
    """on the device; warm-started from the init checkpoint if one was given"""
    normalizer: Normalizer | None
    """the dataset's statistics, or the init checkpoint's (which its weights were trained on)"""
    evaluations: list[dict] = field(default_factory=list)
    eval_seconds: float = 0.0
    saved_update: int | None = None
    """the update whose checkpoint.pt and eval.json the folder holds (None: none yet)"""

    def evaluation_due(self, update: int) -> bool:
        """Whether to evaluate after `update`: every `eval_every` updates and after the last."""
        every = self.args.eval_every
        return (every > 0 and update % every == 0) or update == self.args.num_updates

    def evaluate(
        self,
        actor: ChunkedActor,
        normalizer: Normalizer,
        update: int,
        checkpoint_extra: Callable[[], dict[str, Any]] | None = None,
    ) -> EvalReport:
        """Evaluate a CPU copy of the actor on the shared suite, timed and logged; before the last
        update also write that copy's checkpoint.pt (the update and what `checkpoint_extra`
        returns in its extra) and eval.json (with the update), so that an interrupted run keeps
        its latest evaluated policy. `finish` writes the last update's: `checkpoint_extra` is
        called only when this writes, so that IQL copies its critics once per checkpoint."""
        check_finite(actor.parameters(), f"update {update}")
        start = time.perf_counter()
        args = self.args
        snapshot = copy.deepcopy(actor).cpu().eval()
        policy = make_policy(snapshot, normalizer)
        report = evaluate(policy, self.env_id, episodes_per_skill=args.eval_episodes_per_skill)
        if update < args.num_updates:
            extra = {"update": update, **(checkpoint_extra() if checkpoint_extra else {})}
            self.save(snapshot, normalizer, report, update, extra)
        self.eval_seconds += time.perf_counter() - start
        log_evaluation(self.writer, report, update)
        self.evaluations.append(report.curve_point(update=update))
        return report

    def save(
        self,
        actor: ChunkedActor,
        normalizer: Normalizer | None,
        report: EvalReport,
        update: int,
        extra: dict[str, Any],
    ) -> dict:
        """Write checkpoint.pt (the CPU `actor`; `extra` after the dataset and the budget) and
        eval.json (the report and its `update`, as the online learners' has its global_step),
        each atomically and with Ctrl-C held back until both are written (`defer_signals`), so
        that they always come from the same evaluation; return that eval.json record."""
        args = self.args
        evaluation = {**report.to_dict(), "update": update}
        with defer_signals():
            save_checkpoint(
                self.run_dir / "checkpoint.pt",
                self.algo,
                self.env_id,
                actor,
                normalizer,
                dataclasses.asdict(args),
                extra={"dataset_id": args.dataset_id, "num_updates": args.num_updates, **extra},
            )
            write_json(self.run_dir / "eval.json", evaluation)
            self.saved_update = update
        return evaluation

    def interrupted(self, update: int, stop: BaseException) -> None:
        """After Ctrl-C (or TrainingDiverged, `stop`): close the TensorBoard logs (so they keep
        every point up to the interruption) and say on stderr, in one line, what the run folder
        keeps. A run does not resume, and its folder has no summary.json; checkpoint.pt and
        eval.json are there only if an evaluation (`eval_every`) finished before the
        interruption."""
        self.writer.close()
        kept = "its TensorBoard logs"
        if self.saved_update is not None:
            kept += (
                f" and the checkpoint.pt and eval.json of the evaluation at update "
                f"{self.saved_update}"
            )
        print(
            f"{stop_cause(stop)} at update {update} of {self.args.num_updates}: {self.run_dir} "
            f"keeps {kept}, but no summary.json; a run does not resume, so start it again with a "
            "new --run-dir",
            file=sys.stderr,
        )

    def print_progress(self, update: int, start: float, losses: dict[str, torch.Tensor]) -> None:
        """Every `print_every` updates but the last (its evaluation line follows): the losses,
        updates/s and the time left, so a run without evaluations on the way is not silent.
        Losses are read (a device sync) only when printed."""
        args = self.args
        if args.print_every <= 0 or update % args.print_every or update >= args.num_updates:
            return
        rate = update / (time.perf_counter() - start - self.eval_seconds)
        named = ", ".join(f"{name} {loss.item():.4f}" for name, loss in losses.items())
        left = (args.num_updates - update) / rate
        total = args.num_updates
        print(f"update {update}/{total}: {named}, {rate:.0f} updates/s, {left:.0f} s left")

    def finish(
        self,
        actor: ChunkedActor,
        normalizer: Normalizer,
        report: EvalReport,
        losses: dict[str, float],
        train_seconds: float,
        checkpoint_extra: dict[str, Any],
        **algo_fields: Any,
    ) -> dict:
        """Save the actor's checkpoint (with `checkpoint_extra`), eval.json, the videos if asked
        and summary.json; close the logs; return the summary (`algo_fields`: the learner's own
        entries)."""
        args, data = self.args, self.data
        actor = actor.cpu().eval()
        evaluation = self.save(actor, normalizer, report, args.num_updates, checkpoint_extra)
        videos = []
        if args.capture_video:
            videos = record_videos(make_policy(actor, normalizer), self.env_id, self.run_dir)
            torch.set_num_threads(args.torch_threads)
        self.writer.close()
        summary = {
            "algo": self.algo,
            "dataset_id": args.dataset_id,
            "env_id": self.env_id,
            "seed": args.seed,
            "run_dir": str(self.run_dir),
            "updates": args.num_updates,
            "transitions": data.size,
            "episodes": data.num_episodes,
            **algo_fields,
            "final_losses": losses,
            "segments": data.num_segments,
            "chunk_length": args.chunk_length,
            "ensemble_decay": args.ensemble_decay,
            "binary_gripper": args.binary_gripper,
            "updates_per_s": args.num_updates / train_seconds,
            "train_seconds": train_seconds,
            "eval_seconds": self.eval_seconds,
            "eval": evaluation,
            "evals": self.evaluations,
            "checkpoint": str(self.run_dir / "checkpoint.pt"),
            "videos": videos,
            "args": dataclasses.asdict(args),
        }
        write_json(self.run_dir / "summary.json", summary)
        print(format_table(evaluation))
        return summary


class TrainingDiverged(RuntimeError):
    """The policy's weights are no longer finite numbers (NaN or inf), so every action from here
    on would be NaN: raised at the next check (`check_finite`), said in one line on the command
    line (`run_cli`), with what the run folder keeps."""


def check_finite(parameters: Iterable[torch.Tensor], where: str) -> None:
    """TrainingDiverged unless every parameter is finite: checked at each evaluation (and after
    each PPO update), before a NaN policy acts, rather than failing inside an env on a NaN
    action."""
    if not all(bool(torch.isfinite(parameter).all()) for parameter in parameters):
        raise TrainingDiverged(
            f"training diverged by {where}: the policy's weights are no longer finite numbers "
            "(NaN or inf), so its actions would be; lower the learning rate(s) and start again "
            "with a new --run-dir"
        )


def stop_cause(stop: BaseException) -> str:
    """How a run's stop line names what stopped it: Ctrl-C, or training that diverged."""
    return "stopped (training diverged)" if isinstance(stop, TrainingDiverged) else "interrupted"


class RunRefused(ValueError):
    """The run's inputs do not fit each other (dataset, env, init checkpoint): refused before
    the run writes anything, and said in one line on the command line (`run_cli`)."""


def start_offline_run(algo: str, args: Any, success_only: bool = False) -> OfflineRun:
    """Start an offline learner's run from its checked Args: torch threads and seeds, the device,
    the dataset (only its successful segments with `success_only`) and the env it is evaluated
    on (their spaces must match), the actor (warm-started from `init_checkpoint` if given) and
    its normaliser, then the run folder and TensorBoard with the hyperparameters. A run_dir holding
    an earlier run is refused first (`check_new_run_dir`), inputs that do not fit are a RunRefused
    before the folder is made."""
    check_new_run_dir(args)
    torch.set_num_threads(args.torch_threads)
    seed_everything(args.seed, args.torch_deterministic)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    try:
        data = load(args.dataset_id, args.datasets_path)
        env_id = args.env_id or data.env_id
        check_env_id(env_id)
        env = gym.make(env_id)
        check_compatible(data, env)
        env.close()
        if success_only:
            data = data.subset(data.segment_success)
            if data.size == 0:
                raise ValueError(
                    f"dataset {args.dataset_id} has no successful segment to learn from; "
                    "train without --success-only or collect data with successes"
                )
        actor = ChunkedActor(
            data.obs_size,
            data.action_size,
            args.hidden,
            chunk_length=args.chunk_length,
            binary_gripper=args.binary_gripper,
            ensemble_decay=args.ensemble_decay,
        )
        normalizer = observation_normalizer(data)
        if args.init_checkpoint is not None:
            normalizer = warm_start(actor, args.init_checkpoint)
    except ValueError as error:
        raise RunRefused(str(error)) from error

    timestamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"{algo}__{args.dataset_id.replace('/', '-')}__{args.seed}__{timestamp}"
    run_dir = writable_run_dir(args.run_dir, lambda: new_run_folder(name))
    writer = open_writer(run_dir, args)
    return OfflineRun(
        algo, args, data, env_id, device, run_dir, writer, actor.to(device), normalizer
    )


RUN_FILES = ("checkpoint.pt", "summary.json", "eval.json")
"""What a learner's run writes into its folder; a run_dir that holds any of them is refused, so
that no run overwrites another's checkpoint."""

TENSORBOARD_LOGS = "events.out.tfevents.*"
"""The TensorBoard event files a learner's writer adds to its folder; a run_dir that holds any
(say, of a run stopped before its first evaluation) is refused too, since TensorBoard would show
both runs' curves as one."""


def check_new_run_dir(args: Any) -> None:
    """Refuse (ValueError naming the folder) a run_dir that is a file or holds an earlier run's
    files (RUN_FILES) or TensorBoard logs (TENSORBOARD_LOGS): nothing a user produced is ever lost
    or mixed with another run's, so every learner's run refuses it as it starts
    (`start_online_run`, `start_offline_run`), from Python as on the command line (`parse_cli`,
    which says it in one line). None (a new folder under runs/) and a folder without those files
    (another log, say) are accepted. Whoever reuses a folder on purpose empties it first: the
    benchmark runner before each attempt of an online run (`benchmark.runs.prepare`), the collect
    loop by removing its uncommitted policy folders, the audit its earlier re-run."""
    if args.run_dir is None:
        return
    run_dir = Path(args.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"run_dir {run_dir} is a file; give a folder")
    if found := [name for name in RUN_FILES if (run_dir / name).exists()]:
        raise ValueError(
            f"run_dir {run_dir} holds a run already ({', '.join(found)}), which a new run never "
            "overwrites; give another folder, or move that one away (or delete it) first"
        )
    if logs := sorted(path.name for path in run_dir.glob(TENSORBOARD_LOGS)):
        more = f" and {len(logs) - 1} more" if len(logs) > 1 else ""
        raise ValueError(
            f"run_dir {run_dir} holds the TensorBoard logs of an earlier run ({logs[0]}{more}), "
            "which TensorBoard would show mixed with a new run's; give another folder, or move "
            "that one away (or delete it) first"
        )


def parse_cli(args_type: type[ArgsT], prog: str, *checks: Callable[[ArgsT], object]) -> ArgsT:
    """A learner's Args from its command line, run through `checks` and `check_new_run_dir`
    before any training: a setting they refuse (ValueError) is said in one line
    `PROG: error: ...` and exits 2, as the `gameon` command does, rather than as a traceback."""
    args = tyro.cli(args_type, prog=prog)
    try:
        for check in (*checks, check_new_run_dir):
            check(args)
    except ValueError as error:
        print(f"{prog}: error: {usage_message(error, args_type)}", file=sys.stderr)
        raise SystemExit(2) from None
    return args


def run_cli(
    train: Callable[[ArgsT], object],
    args_type: type[ArgsT],
    prog: str,
    *checks: Callable[[ArgsT], object],
) -> None:
    """A learner's command line: its Args from `parse_cli`, then `train`; inputs that do not fit
    each other (RunRefused, before anything is written) end in one line and exit 2, Ctrl-C in
    `PROG: interrupted` and exit 130 (after the learner's line on what its run folder keeps,
    `OnlineRun.interrupted` or `OfflineRun.interrupted`) rather than a traceback."""
    args = parse_cli(args_type, prog, *checks)
    try:
        train(args)
    except RunRefused as error:
        print(f"{prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    except VLMRefused as error:
        print(
            f"{prog}: error: {error}. A run does not resume: with that fixed, start it again "
            "with a new --run-dir",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    except TrainingDiverged as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
