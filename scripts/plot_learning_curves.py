"""Plot online learners' evaluation curves (success vs env steps) from their run folders.

Usage: python scripts/plot_learning_curves.py OUT.png GROUP=RUN_DIR[,RUN_DIR...] [GROUP=...]
       python scripts/plot_learning_curves.py --export-curve RUN_DIR

A finished run's curve is `evals` in its summary.json. A run stopped before the end has no
summary; `--export-curve` writes RUN_DIR/curve.json from the `eval/success_rate` scalars of its
TensorBoard log, which the plot then reads.

Each GROUP becomes one panel: a thin line per run (seed) and a thick line for their mean at the
steps all runs evaluated. Example (the README's figure):

    python scripts/plot_learning_curves.py results/baselines/curves.png \
        "PPO Reach-v0=results/baselines/ppo_reach_feat_1,results/baselines/ppo_reach_feat_2,..."
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

COLUMNS = 4
"""Panels per row of the figure."""


def read_curve(run_dir: Path) -> tuple[list[int], list[float]]:
    """(global steps, overall success rates) of a run's evaluations: summary.json or curve.json."""
    if (run_dir / "summary.json").is_file():
        evals = json.loads((run_dir / "summary.json").read_text())["evals"]
    elif (run_dir / "curve.json").is_file():
        evals = json.loads((run_dir / "curve.json").read_text())
    else:
        raise SystemExit(
            f"{run_dir} has neither summary.json nor curve.json: pass folders of ppo/sac runs "
            "(for a stopped run, --export-curve it first)"
        )
    return [point["global_step"] for point in evals], [point["success_rate"] for point in evals]


def export_curve(run_dir: Path) -> None:
    """Write run_dir/curve.json from the eval/success_rate scalars of its TensorBoard log."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    if "eval/success_rate" not in events.Tags()["scalars"]:
        raise SystemExit(f"{run_dir} has no TensorBoard log with eval/success_rate")
    curve = [
        {"global_step": event.step, "success_rate": round(event.value, 4)}
        for event in events.Scalars("eval/success_rate")
    ]
    (run_dir / "curve.json").write_text(json.dumps(curve, indent=1))
    print(f"wrote {run_dir / 'curve.json'}: {len(curve)} evaluations")


def parse_group(text: str) -> tuple[str, list[Path]]:
    """'title=dir1,dir2' -> (title, [dir1, dir2])."""
    title, separator, dirs = text.partition("=")
    if not separator or not dirs:
        raise SystemExit(f"expected GROUP=RUN_DIR[,RUN_DIR...], got {text!r}")
    return title, [Path(d) for d in dirs.split(",")]


def plot(out: Path, groups: list[tuple[str, list[Path]]]) -> None:
    """One panel per group, COLUMNS to a row: each run's curve and the mean over runs."""
    rows = math.ceil(len(groups) / COLUMNS)
    columns = min(len(groups), COLUMNS)
    figure, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.4 * rows), squeeze=False)
    for axis in axes.flat[len(groups) :]:
        axis.set_visible(False)
    for axis, (title, run_dirs) in zip(axes.flat, groups, strict=False):  # spare axes hidden
        curves = {run_dir.name: read_curve(run_dir) for run_dir in run_dirs}
        for name, (steps, rates) in curves.items():
            axis.plot(steps, rates, marker=".", linewidth=1, alpha=0.6, label=name)
        shared = sorted(set.intersection(*(set(steps) for steps, _ in curves.values())))
        if shared:
            mean = [
                sum(rates[steps.index(step)] for steps, rates in curves.values()) / len(curves)
                for step in shared
            ]
            axis.plot(shared, mean, color="black", linewidth=2.5, label="mean")
        axis.set(title=title, xlabel="env steps", ylabel="eval success", ylim=(-0.03, 1.03))
        axis.xaxis.set_major_formatter(FuncFormatter(lambda steps, _: f"{steps / 1000:g}k"))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--export-curve":
        export_curve(Path(sys.argv[2]))
        sys.exit()
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    plot(Path(sys.argv[1]), [parse_group(arg) for arg in sys.argv[2:]])
