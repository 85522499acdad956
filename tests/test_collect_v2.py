"""Collect protocol v2: collectors, hindsight relabelling, the composed evaluation, the record."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("minari")

from rich.progress import Progress, TaskID  # noqa: E402

from gameon.baselines.datasets import episode_records  # noqa: E402
from gameon.benchmark.report import controls_check, summarise  # noqa: E402
from gameon.envs import language  # noqa: E402
from gameon.experimenter import loop  # noqa: E402
from gameon.experimenter.embodiment import (  # noqa: E402
    ACTORS,
    Embodiment,
    evaluate_composed,
    learned_library,
)
from gameon.experimenter.loop import LoopConfig, run_experiment  # noqa: E402
from gameon.experimenter.skills import (  # noqa: E402
    LearnedExecutor,
    ScriptedExecutor,
    default_library,
)
from gameon.records import RANKED_MODE, RunRecord, load_record  # noqa: E402
from tests.record_factory import make_record  # noqa: E402

TOWER = "build a tower of red, green and blue from the bottom up"
SCRIPTED, LEARNED = ACTORS.index("scripted"), ACTORS.index("learned")


def untrained_checkpoint(path: Path) -> Path:
    """An untrained actor in the baselines' checkpoint format: it fails every skill."""
    import torch

    from gameon.policy import Actor, flat_size, save_checkpoint

    env = gym.make("GameOn/MultiSkill-v0")
    torch.manual_seed(0)
    actor = Actor(flat_size(env.observation_space), 5, hidden=(8,))
    return save_checkpoint(path, "bc", "GameOn/MultiSkill-v0", actor, None, {})


def test_mixed_collector_takes_over_a_failed_learned_skill_and_labels_its_steps(
    tmp_path: Path,
) -> None:
    library = learned_library(default_library(), untrained_checkpoint(tmp_path / "actor.pt"))
    with Embodiment(
        "GameOn/MultiSkill-v0", library, skill_budget={"reach": 20}, takeover=ScriptedExecutor()
    ) as embodiment:
        record = embodiment.execute("move the gripper above the red block", seed=3)
    learned, takeover = record.outcomes
    assert (learned.executor, learned.success, learned.steps) == ("learned", False, 20)
    assert takeover.takeover and takeover.executor == "scripted" and takeover.success
    assert record.success and not record.attempt_success
    assert list(record.actors[:20]) == [LEARNED] * 20
    assert set(record.actors[20:]) == {SCRIPTED}
    assert record.truncations[19] and not record.terminations[19]  # the learned attempt failed
    assert record.terminations[-1]
    assert record.actor_steps() == {"scripted": record.steps - 20, "learned": 20, "coded": 0}


def test_learned_collector_has_no_takeover(tmp_path: Path) -> None:
    library = learned_library(default_library(), untrained_checkpoint(tmp_path / "actor.pt"))
    with Embodiment("GameOn/MultiSkill-v0", library, skill_budget={"reach": 20}) as embodiment:
        record = embodiment.execute("move the gripper above the red block", seed=3)
    assert [o.executor for o in record.outcomes] == ["learned"]
    assert not record.success and set(record.actors) == {LEARNED}


def test_a_tower_episode_is_stored_again_under_the_tower_goal_marked_relabelled(
    tmp_path: Path,
) -> None:
    with Embodiment("GameOn/MultiSkill-v0", default_library()) as embodiment:
        record = embodiment.execute(TOWER, seed=5)
        assert record.needs_relabel and len(record.skills) == 2
        copy = record.relabel()
        embodiment.record([record, copy], "gameon/v2-test-v0", tmp_path)
    tower_goal = language.encode(language.parse(TOWER))
    stack_goals = {tuple(g) for g in record.observations["goal"]}
    assert tuple(tower_goal) not in stack_goals  # the executed steps carry stack goals only
    assert np.array_equal(copy.observations["goal"], np.tile(tower_goal, (record.steps + 1, 1)))
    assert np.array_equal(copy.actions, record.actions)
    assert (
        copy.terminations.sum() == int(record.success) and copy.terminations[-1] == record.success
    )
    assert copy.truncations.sum() == int(not record.success)
    assert not copy.needs_relabel
    stored = episode_records("gameon/v2-test-v0", tmp_path)
    assert [stored[0]["relabelled"], stored[1]["relabelled"]] == [False, True]
    assert stored[1]["instruction"] == TOWER and stored[1]["success"] == record.success


def test_the_composed_evaluation_runs_no_scripted_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = untrained_checkpoint(tmp_path / "actor.pt")
    with pytest.raises(ValueError, match="learned skills only.*scripted executor"):
        evaluate_composed(default_library(), "GameOn/Tower-v0", 1)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a scripted expert acted in the composed evaluation")

    monkeypatch.setattr(ScriptedExecutor, "policy", refuse)
    used = []
    learned_policy = LearnedExecutor.policy
    monkeypatch.setattr(
        LearnedExecutor,
        "policy",
        lambda self, env, step, seed=None: (
            used.append(str(step)) or learned_policy(self, env, step)
        ),
    )
    report = evaluate_composed(learned_library(default_library(), checkpoint), "GameOn/Tower-v0", 1)
    assert report.env_id == "GameOn/Tower-v0" and len(report.episodes) == 1
    assert used and all(step.startswith("stack") for step in used)


def test_a_tiny_learned_collector_run_records_both_target_evaluations(tmp_path: Path) -> None:
    config = LoopConfig(
        env_id="GameOn/Stack-v0",
        curriculum="positive_control",
        collector="learned",
        iterations=1,
        episodes_per_iteration=2,
        seed_episodes=4,
        num_updates=30,
        eval_episodes_per_skill=1,
        target_eval_episodes=1,
        report_env_id="GameOn/Tower-v0",
        auto_stop=False,
    )
    record = run_experiment(config, tmp_path, progress=False)
    assert record.protocol_version == 2
    modes = {(t.mode, t.evaluation.env_id) for t in record.target_evaluations}
    assert modes == {
        (mode, env)
        for mode in ("monolithic", "composed")
        for env in (config.env_id, config.report_env_id)
    }
    ranked = record.target_evaluation(RANKED_MODE)
    assert record.target_success == ranked.success_rate(("stack",))
    first, collected = record.extra["iterations"]
    assert first["actor_steps"]["learned"] == 0  # the seed data is the experts'
    assert collected["actor_steps"]["learned"] > 0 and collected["actor_steps"]["scripted"] == 0
    assert collected["practised"] == {"lift": 2}  # the positive control starts at the chain's head
    assert load_record(tmp_path) == record
    stored = episode_records("gameon/collect-v0", tmp_path / record.extra["dataset"]["root"])
    relabelled = [e for e in stored.values() if e["relabelled"]]
    multi_step = [
        e for e in stored.values() if not e["relabelled"] and len(e["skill_sequence"]) > 1
    ]
    assert len(relabelled) == len(multi_step)


def test_the_dataset_episode_count_includes_the_relabelled_episodes(tmp_path: Path) -> None:
    config = LoopConfig(
        env_id="GameOn/Tower-v0",
        eval_env_id="GameOn/Tower-v0",
        curriculum="fixed",
        seed=3,
        iterations=0,
        seed_episodes=3,
        num_updates=20,
        eval_episodes_per_skill=1,
        target_eval_episodes=1,
        auto_stop=False,
    )
    record = run_experiment(config, tmp_path, progress=False)
    state = json.loads((tmp_path / "state.json").read_text())
    stored = episode_records("gameon/collect-v0", tmp_path / state["dataset"]["root"])
    relabelled = sum(e["relabelled"] for e in stored.values())
    assert relabelled == state["history"][0]["relabelled_episodes"] > 0  # seed 3 draws towers
    assert state["dataset"]["episodes"] == len(stored) == config.seed_episodes + relabelled
    assert record.extra["dataset"]["episodes"] == len(stored)
    assert [it["episodes"] for it in record.extra["iterations"]] == [len(stored)]


def test_a_demonstration_runs_every_skill_of_the_plan_with_the_given_executor(
    tmp_path: Path,
) -> None:
    library = learned_library(default_library(), untrained_checkpoint(tmp_path / "actor.pt"))
    with Embodiment("GameOn/MultiSkill-v0", library) as embodiment:
        record = embodiment.execute(TOWER, seed=5, executor=ScriptedExecutor())
    assert [o.executor for o in record.outcomes] == ["scripted", "scripted"]
    assert record.success and record.attempt_success
    assert set(record.actors) == {SCRIPTED}


class RecordingProgress(Progress):
    """A rich Progress that draws nothing and keeps every description its tasks were given."""

    def __init__(self) -> None:
        super().__init__(disable=True)
        self.descriptions: list[str] = []

    def update(self, task_id: TaskID, **changes: Any) -> None:
        if changes.get("description") is not None:
            self.descriptions.append(changes["description"])
        super().update(task_id, **changes)

    def reset(self, task_id: TaskID, **changes: Any) -> None:
        if changes.get("description") is not None:
            self.descriptions.append(changes["description"])
        super().reset(task_id, **changes)


@pytest.fixture(scope="module")
def demo_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, RunRecord, RecordingProgress]:
    """A tiny demo-collector run, its progress bars kept (shown, so the loop drives them)."""
    run_dir = tmp_path_factory.mktemp("demo")
    config = LoopConfig(
        env_id="GameOn/Tower-v0",
        curriculum="positive_control",
        collector="demo",
        iterations=1,
        episodes_per_iteration=2,
        seed_episodes=4,
        num_updates=20,
        eval_episodes_per_skill=1,
        target_eval_episodes=1,
        auto_stop=False,
    )
    bar = RecordingProgress()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "progress_bar", lambda enabled: contextlib.nullcontext(bar))
        record = run_experiment(config, run_dir, progress=True)
    return run_dir, record, bar


def test_the_demo_collector_demonstrates_each_task_the_learner_failed(
    demo_run: tuple[Path, RunRecord, RecordingProgress],
) -> None:
    tmp_path, record, _ = demo_run
    collected = record.extra["iterations"][1]
    state_history = json.loads((tmp_path / "state.json").read_text())["history"]
    failed = [not success for success in state_history[1]["attempt_success"]]
    assert collected["demonstrations"] == sum(failed) > 0  # 20 updates teach nothing
    stored = list(
        episode_records("gameon/collect-v0", tmp_path / record.extra["dataset"]["root"]).values()
    )
    assert record.extra["dataset"]["episodes"] == len(stored)
    new = [e for e in stored[record.extra["iterations"][0]["episodes"] :] if not e["relabelled"]]
    attempts, demonstrations = new[:2], new[2:]
    for attempt in attempts:  # the attempt stops at its first failed skill
        assert attempt["actor_steps"]["scripted"] == 0
        assert sum(not o["success"] for o in attempt["outcomes"]) <= 1
    assert len(demonstrations) == sum(failed)
    for demonstration in demonstrations:
        assert demonstration["actor_steps"]["learned"] == 0
        assert demonstration["instruction"] in [a["instruction"] for a in attempts]


def test_the_episodes_bar_counts_the_demonstrations(
    demo_run: tuple[Path, RunRecord, RecordingProgress],
) -> None:
    _, record, bar = demo_run
    demonstrations = record.extra["iterations"][1]["demonstrations"]
    assert demonstrations > 0
    episodes = next(task for task in bar.tasks if task.description.startswith("iteration 1"))
    assert episodes.total == episodes.completed == 2 + demonstrations  # the last iteration's
    assert f"iteration 1: demonstrations of {demonstrations} failed tasks" in bar.descriptions
    assert bar.descriptions[-1].startswith("iteration 1: training bc")  # then what follows


def test_the_report_says_whether_the_controls_separate() -> None:
    runs = {
        "positive_control": [True, True, True, True, False],
        "negative_control": [False, False, False, False, True],
    }
    records = [
        make_record(seed, [outcome] * 4, curriculum=name)
        for name, outcomes in runs.items()
        for seed, outcome in enumerate(outcomes)
    ]
    (check,) = controls_check(summarise(records))
    assert check["separated"] is False  # one seed each way keeps the intervals overlapping
    records = [
        make_record(seed, [name == "positive_control"] * 4, curriculum=name)
        for name in runs
        for seed in range(5)
    ]
    (check,) = controls_check(summarise(records))
    assert check["separated"] is True
    assert check["positive"]["low"] == 1.0 and check["negative"]["high"] == 0.0
    (check,) = controls_check(summarise([r for r in records if r.seed < 2]))
    assert check["separated"] is None  # two seeds a side: no intervals, no verdict


def test_bc_warm_start_continues_from_the_checkpoint_and_keeps_its_normaliser(
    tmp_path: Path,
) -> None:
    import torch

    from gameon.baselines import bc, datasets
    from gameon.policy import load_checkpoint

    datasets.collect(
        datasets.Args(
            env_id="GameOn/Reach-v0",
            episodes_per_skill=2,
            dataset_id="gameon/warm-v0",
            datasets_path=str(tmp_path),
            progress=False,
        )
    )
    common = {"dataset_id": "gameon/warm-v0", "datasets_path": str(tmp_path)}
    common |= {"eval_episodes_per_skill": 1, "hidden": (16,)}
    first = bc.train(bc.Args(**common, num_updates=5, run_dir=str(tmp_path / "first")))
    frozen = bc.train(
        bc.Args(
            **common,
            num_updates=1,
            learning_rate=0.0,
            init_checkpoint=first["checkpoint"],
            run_dir=str(tmp_path / "frozen"),
            seed=7,
        )
    )
    start, start_normalizer, _ = load_checkpoint(first["checkpoint"])
    after, after_normalizer, _ = load_checkpoint(frozen["checkpoint"])
    for (name, value), (_, other) in zip(
        start.state_dict().items(), after.state_dict().items(), strict=True
    ):
        assert torch.equal(value, other), name
    assert np.array_equal(start_normalizer.mean, after_normalizer.mean)
    with pytest.raises(ValueError, match="does not match this run's"):
        bc.train(
            bc.Args(
                **{**common, "hidden": (32,)},
                num_updates=1,
                init_checkpoint=first["checkpoint"],
                run_dir=str(tmp_path / "bad"),
            )
        )
    assert not (tmp_path / "bad").exists()  # refused before the run folder is made


def test_verify_compares_a_v2_claim_with_its_target_evaluations_not_the_final_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ranked (composed) tower success may differ from the final per-skill evaluation's
    tower episodes (monolithic); verify re-runs the target evaluations and compares those."""
    from gameon.benchmark import leaderboard

    config = LoopConfig(
        env_id="GameOn/Tower-v0",
        curriculum="fixed",
        collector="learned",
        iterations=0,
        seed_episodes=2,
        num_updates=10,
        eval_episodes_per_skill=1,
        target_eval_episodes=1,
    )
    run_dir = tmp_path / "collect__Tower__fixed__bc__s0"
    record = run_experiment(config, run_dir, progress=False)
    composed = record.target_evaluation(RANKED_MODE)
    built = [e.model_copy(update={"success": True}) for e in composed.episodes]
    doctored = record.model_copy(
        update={
            "target_evaluations": [
                t.model_copy(
                    update={"evaluation": t.evaluation.model_copy(update={"episodes": built})}
                )
                if t.mode == RANKED_MODE
                else t
                for t in record.target_evaluations
            ]
        }
    )
    assert doctored.target_success == 1.0 and record.evaluation.per_skill()["tower"] == 0.0
    (run_dir / "record.json").write_text(doctored.model_dump_json())
    monkeypatch.setattr(  # the target evaluations reproduce; only the final one is re-run
        leaderboard,
        "_reevaluate_target",
        lambda run, mode, claimed: SimpleNamespace(
            success_rate=claimed.success_rate(), episodes=claimed.episodes
        ),
    )
    result = leaderboard.submit([run_dir], tmp_path / "board", verify=True, min_seeds=1)
    assert result.accepted, result.reasons
