"""The `gameon` command line: list the envs, record a scripted expert's episode, run experiments,
and (through `gameon.benchmark.commands`) the benchmark harness and the leaderboard.

Beyond tyro (in every extra that has a command), each command imports what it needs when it runs,
so a missing optional extra is answered with one line naming the extra to install
(`gameon.extras.missing_extra`), whichever command needs it.
"""

from __future__ import annotations

import ctypes
import math
import os
import select
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import gymnasium as gym
import numpy as np

try:
    import tyro
except ModuleNotFoundError:  # without the cli extra: run_command says which extra to install
    tyro = None

from gameon.atomic import atomic_file, check_writable, out_of_space_line, write_failure_line
from gameon.envs import ENV_SKILLS, language
from gameon.envs.stacking_env import CAMERAS, NoDisplay
from gameon.evaluation import mp4_writer
from gameon.extras import first_missing, missing_extra
from gameon.text import plural

if TYPE_CHECKING:
    from gameon.experimenter.loop import LoopConfig
    from gameon.records import RunRecord

VIDEO_SUFFIXES = (".mp4", ".gif")
FPS = 20
"""Video frame rate: one frame per 20 Hz control step, so videos play in real time."""
FRAMES_AFTER_SUCCESS = 10
EXAMPLE_COLOURS = ("red", "green", "blue")


HARNESS_COMMANDS = ("bench", "leaderboard")
"""Subcommands of the benchmark harness (`gameon.benchmark.commands`), e.g. `gameon bench run`."""
COMMANDS = {
    "envs": "list every environment id with its skills, max steps and example instructions",
    "demo": "record a scripted expert's episode to a video (.mp4 or .gif)",
    "experiment": "run the collect protocol (the Game On cycle) with one curriculum",
    "bench": "run|report: run a benchmark matrix (default: the smoke preset), aggregate its runs",
    "leaderboard": "submit|audit|html: add validated run records, re-train sampled runs of an "
    "entry, write the static page",
}
"""Every `gameon` command, as `gameon --help` lists them."""


INTERRUPTED = {
    "experiment": "run the same command again to resume",
    "demo": "no video written",
}
"""What Ctrl-C left, said in place of a traceback (the harness's commands say their own)."""


class UsageError(Exception):
    """A bad option value: reported in one line, exit code 2."""


class CommandFailed(Exception):
    """Work that failed for a reason outside the options (a video ffmpeg could not finish):
    reported in one line, exit code 1."""


@dataclass
class Envs:
    """List every registered environment id with its skills, max steps and example instructions."""


@dataclass
class Demo:
    """Run a scripted expert episode and write it to a video (.mp4 or .gif)."""

    env_id: str = "GameOn/Tower-v0"
    """registered environment id (see `gameon envs`)"""
    instruction: str | None = None
    """instruction text; by default one is sampled from the env's skills"""
    seed: int = 0
    """seed of the episode's reset (scene layout and sampled instruction)"""
    out: Path = Path("videos/demo.mp4")
    """output video; the suffix (.mp4 or .gif) picks the format"""
    camera: str = "front"
    """camera to record: front, top or wrist"""
    width: int = 480
    """video width, pixels"""
    height: int = 360
    """video height, pixels"""
    noise: float = 0.0
    """scale of the expert's action noise"""
    max_steps: int | None = None
    """step limit of the episode; by default the env's own"""


def experiment_options() -> type:
    """The options of `gameon experiment`: LoopConfig's and three of its own. Built when the
    command runs, since LoopConfig needs the extras that `gameon envs` and `demo` do not."""
    from gameon.experimenter.loop import LoopConfig

    @dataclass
    class Experiment(LoopConfig):
        """Run the collect protocol (the Game On cycle): practise tasks, record them, retrain,
        evaluate.

        An existing run folder of the same config resumes where it stopped; a resume may change
        the iterations (more extend the run), auto-stop, the VLM request timeout and retries,
        and the settings its curriculum does not read (e.g. the backend of a non-vlm run).
        With `--curriculum vlm` a VLM backend proposes, decomposes and analyses (`--backend
        rules` runs offline).
        """

        vlm_backend: Annotated[str, tyro.conf.arg(aliases=("--backend",))] = "rules"
        """vlm curriculum: rules (offline stand-in, labelled vlm[rules]) | gemini | openai |
        replay"""
        run_dir: Path | None = None
        """output folder (default: runs/experiment__{curriculum}__{learner}__{seed})"""
        progress: bool = True
        """show progress: bars over iterations and episodes, a line per committed iteration
        (--no-progress: nothing between the plan line and the summary)"""

    return Experiment


def _accepted(values: Sequence[str]) -> str:
    return ", ".join(values)


def command_name(arguments: Sequence[str]) -> str:
    """The command the arguments run, e.g. "bench run", "demo", or "" for none."""
    if not arguments or arguments[0].startswith("-"):
        return ""
    if arguments[0] in HARNESS_COMMANDS and len(arguments) > 1:
        return " ".join(arguments[:2])
    return arguments[0]


def examples(skills: Sequence[str]) -> list[str]:
    """One example instruction per skill, over a red, green and blue scene."""
    return [
        str(language.sample(skill, EXAMPLE_COLOURS, np.random.default_rng(0))) for skill in skills
    ]


def list_envs() -> None:
    """Print a table of every registered id, its skills, max steps and example instructions."""
    rows = [
        (env_id, ", ".join(skills), str(max_steps), "\n".join(examples(skills)))
        for env_id, (skills, max_steps) in ENV_SKILLS.items()
    ]
    header = ("id", "skills", "max steps", "example instructions")
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for env_id, skills, max_steps, text in rows:
            print(f"{env_id}  [{skills}]  max steps {max_steps}")
            for line in text.splitlines():
                print(f"    {line}")
        return
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    table = Table(*header, show_lines=True)
    ids = table.columns[0]
    ids.no_wrap, ids.min_width = True, max(len(row[0]) for row in rows)  # whole, to be copied
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _check(args: Demo) -> None:
    if args.env_id not in ENV_SKILLS:
        raise UsageError(f"unknown env id {args.env_id!r}; accepted: {_accepted(ENV_SKILLS)}")
    if args.out.is_dir():
        raise UsageError(
            f"cannot write the video to {str(args.out)!r}: it is a folder; give a file name in it, "
            f"e.g. {str(args.out / 'demo.mp4')!r}"
        )
    if args.out.name.lower() in VIDEO_SUFFIXES:  # ".mp4": a name that is all suffix
        raise UsageError(
            f"{str(args.out)!r} has no file name before its suffix; give one, e.g. "
            f"{str(args.out.with_name('demo' + args.out.name))!r}"
        )
    if args.out.suffix.lower() not in VIDEO_SUFFIXES:
        raise UsageError(
            f"unknown video suffix {args.out.suffix!r} in {str(args.out)!r}; "
            f"accepted: {_accepted(VIDEO_SUFFIXES)}"
        )
    if args.camera not in CAMERAS:
        raise UsageError(f"unknown camera {args.camera!r}; accepted: {_accepted(CAMERAS)}")
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {args.max_steps}")
    if not math.isfinite(args.noise) or args.noise < 0:
        raise UsageError(f"--noise must be a number of at least 0, got {args.noise}")
    if args.seed < 0:
        raise UsageError(f"--seed must be at least 0, got {args.seed}")
    existing = next(p for p in (args.out.parent, *args.out.parent.parents) if p.exists())
    if not existing.is_dir():
        raise UsageError(
            f"cannot write the video to {str(args.out)!r}: {str(existing)!r} is not a folder; "
            "give a path in a folder that exists or can be created"
        )


def write_video(path: Path, frames: list[np.ndarray], fps: int = FPS) -> None:
    """Write RGB frames to an .mp4 (needs imageio-ffmpeg) or a looping .gif, through a temporary
    file and a rename, so that a failed or interrupted write leaves no half video at `path`."""
    if path.suffix.lower() == ".mp4":
        with mp4_writer(path, fps) as write:
            for frame in frames:
                write(frame)
        return
    import imageio.v3 as iio

    with atomic_file(path) as temporary:
        iio.imwrite(temporary, np.stack(frames), duration=1000 / fps, loop=0)


def demo(args: Demo) -> dict:
    """Record one scripted expert episode to `args.out`; return what was printed as a dict."""
    _check(args)
    import imageio.v3  # noqa: F401  (the cli extra: say so before the episode, not after it)

    if args.out.suffix.lower() == ".mp4":
        import imageio_ffmpeg  # noqa: F401
    try:
        from gameon.envs.experts import make_expert
    except ImportError as error:
        raise UsageError(f"scripted experts are unavailable: {error}") from None
    kwargs = {} if args.max_steps is None else {"max_episode_steps": args.max_steps}
    try:
        env = gym.make(
            args.env_id,
            render_mode="rgb_array",
            camera=args.camera,
            width=args.width,
            height=args.height,
            terminate_on_success=False,
            **kwargs,
        )
        options = None if args.instruction is None else {"instruction": args.instruction}
        obs, info = env.reset(seed=args.seed, options=options)
    except ValueError as error:
        raise UsageError(str(error).strip()) from None
    try:
        check_writable(args.out.parent)
    except OSError as error:
        env.close()
        raise UsageError(
            f"cannot write the video to {str(args.out)!r}: {error.strerror or error}; "
            "give a path in a folder you can write"
        ) from None
    expert = make_expert(env.unwrapped, args.noise, seed=args.seed)
    expert.reset()
    frames = [env.render()]
    steps, success_step, after = 0, None, 0
    while after < FRAMES_AFTER_SUCCESS:
        obs, _, terminated, truncated, info = env.step(expert.act(obs))
        steps += 1
        frames.append(env.render())
        if success_step is None and info["success"]:
            success_step = steps
        if success_step is not None:
            after += 1
        if terminated or truncated:
            break
    env.close()
    try:
        write_video(args.out, frames)
    except OSError as error:
        if out_of_space_line(error) is not None:
            raise
        raise CommandFailed(
            f"cannot write the video to {str(args.out)!r}: {error.strerror or error}"
        ) from None
    result = {
        "instruction": info["instruction"],
        "success": success_step is not None,
        "steps": success_step if success_step is not None else steps,
        "sim_unstable": bool(info["sim_unstable"]),
        "out": str(args.out),
    }
    print(f"instruction: {result['instruction']}")
    print(f"success:     {result['success']}")
    print(f"steps:       {result['steps']}" + ("" if result["success"] else " (no success)"))
    if result["sim_unstable"]:
        print("note:        the simulation became unstable and the episode was cut short")
    print(f"video:       {result['out']} ({len(frames)} frames at {FPS} fps)")
    return result


def plan_line(config: LoopConfig, run_dir: Path) -> str:
    """What `gameon experiment` will do and where, said before it starts."""
    return (
        f"experiment: {config.curriculum} curriculum, {config.learner} learner, "
        f"{config.collector} collector, seed {config.seed}: "
        f"{plural(config.seed_episodes, 'seed episode')}, then "
        f"{'up to ' if config.auto_stop else ''}{plural(config.iterations, 'iteration')} of "
        f"{plural(config.episodes_per_iteration, 'episode')} on {config.practice_env_id}, "
        f"{plural(config.num_updates, 'update')} each; target {config.env_id}; "
        f"{'resuming the run in' if (run_dir / 'state.json').is_file() else 'new run in'} {run_dir}"
    )


def time_line(config: LoopConfig, done: int | None) -> str:
    """How long `gameon experiment` should take, idle and at the current load (the costs of
    `gameon bench run`'s estimate); `done`: the last iteration a resumed run committed."""
    from gameon.benchmark.runner import (
        MEASURED_ON,
        collect_seconds,
        duration_text,
        load_average,
        load_factor,
    )

    idle = collect_seconds(asdict(config), done)
    line = f"expected: about {duration_text(idle)} on {MEASURED_ON}"
    cpus = os.cpu_count() or 1
    load = load_average()
    factor = load_factor(load, 1, cpus)
    if factor < 1.2:
        return f"{line}, longer when it is busy"
    return (
        f"{line}; here, now (load {load:.1f} on {cpus} CPUs): about {duration_text(idle * factor)}"
    )


def experiment(args: Any) -> RunRecord:
    """Run (or resume) a collect experiment (`args`: `experiment_options()`); print where its
    record and curves are."""
    from gameon.experimenter.loop import (
        LoopConfig,
        RunFolderInUse,
        check_resumable,
        claim_run_folder,
        run_experiment,
    )
    from gameon.records import RANKED_MODE

    config = LoopConfig(**{f.name: getattr(args, f.name) for f in fields(LoopConfig)})
    run_dir = args.run_dir or Path(
        "runs", f"experiment__{config.curriculum}__{config.learner}__{config.seed}"
    )
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"--run-dir {run_dir} is a file; give a folder (new, or a run to resume)")
    try:
        config.validate()
        state = check_resumable(run_dir, config)  # a damaged state is re-done, not refused
    except NoDisplay:
        raise
    except ValueError as error:
        from gameon.baselines.usage import usage_message

        raise UsageError(usage_message(error, LoopConfig)) from None
    try:
        check_writable(run_dir)
    except OSError as error:
        raise UsageError(
            f"--run-dir {run_dir} cannot be made or written: {error.strerror or error}"
        ) from None
    try:
        with claim_run_folder(run_dir):  # another run at work there: refused before the plan
            pass
    except RunFolderInUse as error:
        raise UsageError(str(error)) from None
    print(plan_line(config, run_dir), flush=True)
    print(time_line(config, None if state is None else state.iteration), flush=True)
    from gameon.experimenter.vlm.estimate import collect_estimate, estimate_lines

    for line in estimate_lines([collect_estimate(config)]):  # paid VLM backends: calls and cost
        print(line, flush=True)
    from gameon.experimenter.curriculum import CurriculumChanged
    from gameon.experimenter.vlm.backend import TRANSCRIPT_FILE, VLMRefused
    from gameon.experimenter.vlm.factory import vlm_line
    from gameon.experimenter.vlm_curriculum import BackendSettingError

    try:
        record = run_experiment(config, run_dir, progress=args.progress)
    except (RunFolderInUse, BackendSettingError, CurriculumChanged) as error:
        raise UsageError(str(error)) from None
    except VLMRefused as error:
        raise UsageError(
            f"{error}. {run_dir} keeps the iterations done so far: with that fixed, run the same "
            "command again to resume"
        ) from None
    print(f"stopped:  {record.extra['stopped']} after iteration {record.extra['iterations_done']}")
    print(f"episodes: {record.extra['dataset']['episodes']}")
    for skill, rate in record.curve[-1].per_skill.items():
        print(f"  {skill:8s} success {rate:.2f}")
    for target in record.target_evaluations:  # the final target evaluations (protocol v2)
        evaluation = target.evaluation
        skills = ENV_SKILLS[evaluation.env_id][0]
        ranked = target.mode == RANKED_MODE and evaluation.env_id == record.env_id
        episodes = len(evaluation.episodes)
        print(
            f"target:   {evaluation.env_id} ({', '.join(skills)}), {target.mode}: success "
            f"{evaluation.success_rate(tuple(skills)):.2f} over {plural(episodes, 'episode')}"
            f"{' (the ranked score)' if ranked else ''}"
        )
    if record.vlm.backend is not None:
        print(vlm_line(record.vlm, run_dir / TRANSCRIPT_FILE))
    print(f"record:   {run_dir / 'record.json'}")
    print(f"curves:   {run_dir / 'curves.png'}")
    return record


def usage() -> str:
    """What `gameon --help` prints: every command, one a line."""
    lines = [
        f"usage: gameon {{{','.join(COMMANDS)}}} ...",
        "",
        "GameOn-RL: language-goal MuJoCo block stacking, curricula and a VLM experimenter.",
        "",
        "commands:",
        *(f"  {name:12s} {text}" for name, text in COMMANDS.items()),
        "",
        "`gameon COMMAND --help` shows a command's options (`gameon bench --help`: its",
        "subcommands). `python -m gameon ...` runs the same commands.",
    ]
    return "\n".join(lines)


def run_command(arguments: Sequence[str]) -> None:
    """Parse and run `gameon envs`, `demo` or `experiment`, or print the usage."""
    if not arguments or arguments[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if arguments else sys.stderr)
        if not arguments:
            raise SystemExit(2)
        return
    name, rest = arguments[0], list(arguments[1:])
    if name not in COMMANDS:
        raise UsageError(f"unknown command {name!r}; accepted: {_accepted(COMMANDS)}")
    if tyro is None:
        raise ModuleNotFoundError("No module named 'tyro'", name="tyro")
    prog = f"gameon {name}"
    if name == "envs":
        tyro.cli(Envs, args=rest, prog=prog)
        list_envs()
    elif name == "demo":
        demo(tyro.cli(Demo, args=rest, prog=prog))
    else:
        experiment(tyro.cli(experiment_options(), args=rest, prog=prog))


def check_extras(arguments: Sequence[str]) -> None:
    """Raise `ModuleNotFoundError` for the first module the command's extras lack, before the
    command makes anything (`gameon.extras.first_missing`); its `--help` needs none."""
    if "-h" in arguments or "--help" in arguments:
        return
    module = first_missing(command_name(arguments))
    if module is not None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
    except (AttributeError, OSError, ValueError):  # no poll here, or stdout is no file
        return False
    return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `gameon` command. A usage error or a missing extra is said in one line
    and exits 2; `bench` and `leaderboard` exit with the harness's status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        check_extras(arguments)
        if arguments and arguments[0] in HARNESS_COMMANDS:
            from gameon.benchmark.commands import main as harness_main

            raise SystemExit(harness_main(arguments))
        run_command(arguments)
        sys.stdout.flush()  # here, so that a reader gone (below) is caught, not at exit
    except BrokenPipeError:  # `gameon envs | head`: the reader stopped early, no traceback
        if not stdout_gone():
            raise  # another pipe broke (a worker's): a real error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    except (UsageError, NoDisplay) as error:
        print(f"gameon: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except CommandFailed as error:
        print(f"gameon: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except ModuleNotFoundError as error:
        line = missing_extra(command_name(arguments), error)
        if line is None:
            raise
        print(line, file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as error:
        line = write_failure_line(error)
        if line is None:
            raise
        print(f"gameon: error: {line}", file=sys.stderr)
        raise SystemExit(1) from None
    except (KeyboardInterrupt, ctypes.ArgumentError) as error:
        # Ctrl-C landing while ctypes converts a call's arguments (EGL's, say) arrives wrapped
        if not isinstance(error, KeyboardInterrupt) and "KeyboardInterrupt" not in str(error):
            raise
        detail = INTERRUPTED.get(command_name(arguments))
        print("interrupted" + (f": {detail}" if detail else ""), file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
