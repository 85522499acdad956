"""The one evaluation protocol every learner and the harness use.

A suite is a fixed list of (instruction, seed) pairs per env: for every skill the env practises,
`episodes_per_skill` instructions sampled from a seeded generator, each with its own reset seed.
A policy is any callable from one observation dict to one action; a policy with memory across
steps (e.g. the temporal ensemble of `gameon.policy.ChunkingPolicy`) may also have a `reset()`
method, which `evaluate` calls at the start of every episode. Success is the oracle's
`info["success"]` at the end of the episode, reported per skill as counts and rates.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np

from gameon.atomic import atomic_file
from gameon.envs import ENV_SKILLS, language

SUITE_SEED = 10_000
"""Evaluation seeds start here, far from the small seeds training runs use."""
Policy = Callable[[dict[str, np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class EvalTask:
    """One evaluation episode to run: the instruction and the reset seed."""

    instruction: str
    seed: int


@dataclass(frozen=True)
class EvalEpisode:
    """The outcome of one evaluation episode."""

    instruction: str
    skill: str
    seed: int
    success: bool
    episode_return: float
    length: int


@dataclass(frozen=True)
class SkillResult:
    successes: int
    episodes: int

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


@dataclass(frozen=True)
class EvalReport:
    """Per-episode outcomes of one suite, with per-skill and overall success."""

    env_id: str
    episodes: tuple[EvalEpisode, ...]

    @property
    def success_rate(self) -> float:
        return float(np.mean([e.success for e in self.episodes])) if self.episodes else 0.0

    def per_skill(self) -> dict[str, SkillResult]:
        skills = dict.fromkeys(e.skill for e in self.episodes)
        return {
            skill: SkillResult(
                successes=sum(e.success for e in self.episodes if e.skill == skill),
                episodes=sum(e.skill == skill for e in self.episodes),
            )
            for skill in skills
        }

    def rates(self) -> dict[str, float]:
        """Success rate per skill."""
        return {skill: result.rate for skill, result in self.per_skill().items()}

    def curve_point(self, **step: int) -> dict:
        """One point of a learning curve: the given step counter(s), then the success rates."""
        return {**step, "success_rate": self.success_rate, "per_skill": self.rates()}

    def to_dict(self) -> dict:
        """JSON-ready record: the episodes and the per-skill counts and rates."""
        return {
            "env_id": self.env_id,
            "success_rate": self.success_rate,
            "per_skill": {
                skill: {"successes": r.successes, "episodes": r.episodes, "rate": r.rate}
                for skill, r in self.per_skill().items()
            },
            "episodes": [asdict(e) for e in self.episodes],
        }


def evaluation_suite(
    env_id: str, episodes_per_skill: int = 10, seed: int = SUITE_SEED
) -> list[EvalTask]:
    """The fixed (instruction, seed) pairs of an env: the same for every learner and run."""
    if env_id not in ENV_SKILLS:
        raise ValueError(f"unknown env id {env_id!r}; registered: {', '.join(ENV_SKILLS)}")
    if episodes_per_skill < 1:
        raise ValueError(f"episodes_per_skill must be >= 1, got {episodes_per_skill}")
    skills, _ = ENV_SKILLS[env_id]
    probe = gym.make(env_id)  # only for its block colours
    colours = probe.unwrapped.colours
    probe.close()
    rng = np.random.default_rng(seed)
    tasks = []
    for skill in skills:
        for _ in range(episodes_per_skill):
            instruction = language.sample(skill, colours, rng)
            tasks.append(EvalTask(str(instruction), seed + len(tasks)))
    return tasks


def evaluate(
    policy: Policy,
    env_id: str,
    suite: list[EvalTask] | None = None,
    episodes_per_skill: int = 10,
    env_kwargs: dict | None = None,
    on_frame: Callable[[np.ndarray], None] | None = None,
    video: Path | None = None,
    wrapper: Callable[[gym.Env], gym.Env] | None = None,
) -> EvalReport:
    """Run a policy on every task of the suite; `on_frame` receives rendered frames if given.

    A policy with a `reset()` method has it called at the start of every episode. `wrapper`
    wraps the env the policy acts in (e.g. `experimenter.coded_actions.CodedActions`); a step
    whose info has `env_steps` counts that many env steps in the episode's length.

    With `video`, the episodes are also filmed one after another into that MP4 file (its folder is
    created; the file appears once the last episode ends) at the env's render fps; this needs
    imageio and its ffmpeg plugin.
    """
    suite = suite if suite is not None else evaluation_suite(env_id, episodes_per_skill)
    kwargs = dict(env_kwargs or {})
    if on_frame is not None or video is not None:
        kwargs.setdefault("render_mode", "rgb_array")
    env = gym.make(env_id, **kwargs)
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: env.close())  # the outermost env, also when the policy raises
        if wrapper is not None:
            env = wrapper(env)
        frame_sinks = [] if on_frame is None else [on_frame]
        if video is not None:
            fps = env.metadata["render_fps"]
            frame_sinks.append(stack.enter_context(mp4_writer(video, fps)))
        episodes = []
        reset_policy = getattr(policy, "reset", None)
        for task in suite:
            observation, info = env.reset(seed=task.seed, options={"instruction": task.instruction})
            if reset_policy is not None:
                reset_policy()
            episode_return, length, done = 0.0, 0, False
            while not done:
                observation, reward, terminated, truncated, info = env.step(policy(observation))
                episode_return += float(reward)
                length += int(info.get("env_steps", 1))
                done = terminated or truncated
                if frame_sinks:
                    frame = env.render()
                    for sink in frame_sinks:
                        sink(frame)
            episodes.append(
                EvalEpisode(
                    instruction=task.instruction,
                    skill=language.parse(task.instruction).skill,
                    seed=task.seed,
                    success=bool(info["success"]),
                    episode_return=episode_return,
                    length=length,
                )
            )
    return EvalReport(env_id, tuple(episodes))


@contextlib.contextmanager
def mp4_writer(path: Path, fps: float) -> Iterator[Callable[[np.ndarray], None]]:
    """Frames to an MP4 (imageio's ffmpeg plugin) through a temporary file beside `path`, renamed
    to it once the block ends, so that a video stopped midway (an error, Ctrl-C) leaves none."""
    import imageio.v2 as imageio

    with atomic_file(path, suffix=".mp4") as temporary:
        # macro_block_size=2: keep even sizes as they are (yuv420p only needs even sizes).
        writer = imageio.get_writer(temporary, fps=fps, macro_block_size=2)
        try:
            yield writer.append_data
        finally:
            writer.close()  # imageio's exit skips it after an error: ffmpeg would write on later
        if not mp4_is_whole(temporary):  # ffmpeg's failure (a full disk) does not reach here
            full = shutil.disk_usage(temporary.parent).free < LOW_DISK_BYTES
            problem = "no space left on the device" if full else "its index was never written"
            code = errno.ENOSPC if full else errno.EIO
            raise OSError(code, f"ffmpeg left the video unfinished: {problem}", str(path))


LOW_DISK_BYTES = 16 * 2**20
"""Free space under which an unfinished video is put down to a full disk."""


def mp4_is_whole(path: Path) -> bool:
    """Whether an MP4's top-level boxes run exactly to its end and include the index ('moov'),
    which ffmpeg writes last: a video cut short by a failed write has neither."""
    size = path.stat().st_size
    kinds, position = set(), 0
    with open(path, "rb") as file:
        while position < size:
            header = file.read(8)
            if len(header) < 8:
                return False
            length, kind = struct.unpack(">I4s", header)
            if length == 1:  # a 64-bit length follows
                length = struct.unpack(">Q", file.read(8))[0]
            elif length == 0:  # the box runs to the end of the file
                length = size - position
            if length < 8 or position + length > size:
                return False
            kinds.add(kind)
            position += length
            file.seek(position)
    return b"moov" in kinds


def format_table(evaluation: EvalReport | dict) -> str:
    """Per-skill success counts and rates, then the overall rate, as a plain-text table.

    Takes a report or its `to_dict()` record.
    """
    record = evaluation.to_dict() if isinstance(evaluation, EvalReport) else evaluation
    lines = [f"{'skill':10s} {'success':>9s} {'rate':>6s}"]
    for skill, result in record["per_skill"].items():
        counts = f"{result['successes']}/{result['episodes']}"
        lines.append(f"{skill:10s} {counts:>9s} {result['rate']:6.2f}")
    lines.append(f"{'all':10s} {'':9s} {record['success_rate']:6.2f}")
    return "\n".join(lines)
