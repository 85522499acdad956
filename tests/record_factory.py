"""Hand-built run records for the report and leaderboard tests: the shared suite's episodes with
chosen outcomes, no training."""

from __future__ import annotations

from pathlib import Path

from gameon.envs.language import parse
from gameon.evaluation import SUITE_SEED, EvalReport, evaluation_suite
from gameon.records import (
    Collected,
    CurvePoint,
    EpisodeOutcome,
    Evaluation,
    RunRecord,
    VLMUsage,
    env_version,
    write_record,
)

ENV_ID = "GameOn/Reach-v0"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def make_record(
    seed: int,
    successes: list[bool],
    curriculum: str = "fixed",
    label: str | None = None,
    learner: str = "bc",
    protocol: str = "collect",
    env_id: str = ENV_ID,
    collected: Collected | None = None,
    vlm: VLMUsage | None = None,
    report: EvalReport | None = None,
    checkpoint: str | None = None,
) -> RunRecord:
    """A valid record evaluated on the shared suite with `successes` as the episodes' verdicts
    (or the episodes of `report`); its curve rises to the final evaluation. A vlm record's model
    answered its calls unless `vlm` says otherwise (the leaderboard refuses one that never did)."""
    if vlm is None and curriculum == "vlm":
        vlm = VLMUsage(backend="rules", model="rules", calls=6)
    episodes = _episodes(env_id, successes) if report is None else _from_report(report)
    evaluation = Evaluation(
        env_id=env_id,
        suite_seed=SUITE_SEED,
        episodes_per_skill=len(episodes) // len({e.skill for e in episodes}),
        episodes=episodes,
    )
    final = CurvePoint(
        step=2, success_rate=evaluation.success_rate(), per_skill=evaluation.per_skill()
    )
    start = CurvePoint(step=0, success_rate=0.0, per_skill=dict.fromkeys(final.per_skill, 0.0))
    return RunRecord(
        run_id=f"{protocol}__{env_id.split('/')[-1]}__{label or curriculum}__{learner}__{seed}",
        protocol=protocol,
        curriculum=curriculum,
        curriculum_label=label or curriculum,
        learner=learner,
        env_id=env_id,
        env_version=env_version(env_id),
        target_skills=list(final.per_skill),
        seed=seed,
        budget={"iterations": 2},
        curve_unit="iterations",
        curve=[start, final],
        evaluation=evaluation,
        collected=collected,
        vlm=vlm or VLMUsage(),
        wall_seconds=10.0,
        env_steps=500,
        steps_per_second=50.0,
        versions={"gameon-rl": "0.1.0", "mujoco": "3.3.0"},
        git_commit=COMMIT,
        created="2025-01-01T00:00:00+00:00",
        checkpoint=checkpoint,
    )


def _episodes(env_id: str, successes: list[bool]) -> list[EpisodeOutcome]:
    suite = evaluation_suite(env_id, len(successes))
    return [
        EpisodeOutcome(
            instruction=task.instruction,
            skill=parse(task.instruction).skill,
            seed=task.seed,
            success=success,
            episode_return=float(success),
            length=50,
        )
        for task, success in zip(suite, successes, strict=True)
    ]


def _from_report(report: EvalReport) -> list[EpisodeOutcome]:
    return [EpisodeOutcome(**vars(episode)) for episode in report.episodes]


def write_run(results_dir: Path, record: RunRecord) -> Path:
    """Write the record into its run folder under results_dir; return the folder."""
    folder = results_dir / record.run_id
    write_record(folder / "record.json", record)
    return folder
