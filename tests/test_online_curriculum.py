"""Curricula inside the online learners: every training episode proposed and reported once,
the curriculum's state saved and restorable, per-skill logs, and clear errors before training."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from gameon.baselines import common, ppo, sac
from gameon.envs.language import parse
from gameon.experimenter.curricula import make_curriculum
from gameon.experimenter.curriculum import (
    HAND_CURRICULUM_TOML,
    Curriculum,
    Outcome,
    episode_budget,
    task_set,
)
from gameon.policy import load_checkpoint

REACH = "GameOn/Reach-v0"
MULTI = "GameOn/MultiSkill-v0"
EPISODE_STEPS = 20
TWO_STAGES = """
[[stage]]
name = "red"
instructions = ["reach red"]
window = 1
threshold = 0.0

[[stage]]
name = "any"
skills = ["reach"]
window = 50
threshold = 0.8
"""


def ppo_args(run_dir: Path, **overrides: object) -> ppo.Args:
    """256 steps over 2 envs of 20-step episodes: 12 finished training episodes, 2 running."""
    settings = {
        "env_id": REACH,
        "reward_mode": "dense",
        "total_timesteps": 256,
        "num_envs": 2,
        "num_steps": 64,
        "num_minibatches": 2,
        "update_epochs": 1,
        "max_episode_steps": EPISODE_STEPS,
        "eval_episodes_per_skill": 1,
        "print_every": 1_000_000,
        "run_dir": str(run_dir),
        **overrides,
    }
    return ppo.Args(**settings)


def sac_args(run_dir: Path, **overrides: object) -> sac.Args:
    """200 steps over 2 envs of 20-step episodes, learning from step 100."""
    settings = {
        "env_id": REACH,
        "reward_mode": "dense",
        "total_timesteps": 200,
        "num_envs": 2,
        "learning_starts": 100,
        "batch_size": 32,
        "hidden": (32, 32),
        "max_episode_steps": EPISODE_STEPS,
        "eval_episodes_per_skill": 1,
        "print_every": 1_000_000,
        "run_dir": str(run_dir),
        **overrides,
    }
    return sac.Args(**settings)


def record_curricula(monkeypatch: pytest.MonkeyPatch) -> list[Curriculum]:
    """Make the learner's curricula log what they propose, every training outcome reported to
    them and, apart, the evaluation outcomes they are told (`update_evaluation`)."""
    built: list[Curriculum] = []
    real = common.make_training_curriculum

    def make(*args: object, **kwargs: object) -> Curriculum:
        curriculum = real(*args, **kwargs)
        curriculum.proposed, curriculum.reported, curriculum.evaluated = [], [], []
        propose, update = curriculum.propose, curriculum.update
        update_evaluation = curriculum.update_evaluation

        def recording_propose() -> str:
            instruction = propose()
            curriculum.proposed.append(instruction)
            return instruction

        def recording_update(instruction: str, success: bool, episode_return: float) -> None:
            update(instruction, success, episode_return)
            curriculum.reported.append(Outcome(instruction, success, episode_return))

        def recording_evaluation(outcomes: list[Outcome]) -> None:
            curriculum.evaluated.extend(outcomes)
            curriculum.update = update  # evaluation outcomes are not training episodes
            try:
                update_evaluation(outcomes)
            finally:
                curriculum.update = recording_update

        curriculum.propose, curriculum.update = recording_propose, recording_update
        curriculum.update_evaluation = recording_evaluation
        built.append(curriculum)
        return curriculum

    monkeypatch.setattr(common, "make_training_curriculum", make)
    return built


def check_bookkeeping(summary: dict, curriculum: Curriculum, num_envs: int) -> None:
    """Each finished training episode was proposed by the curriculum and reported exactly once."""
    finished = summary["train_episodes"]
    assert finished >= 2 * num_envs
    assert len(curriculum.reported) == finished
    assert len(curriculum.proposed) == finished + num_envs, "the last episodes still ran"
    reported = Counter(outcome.instruction for outcome in curriculum.reported)
    assert not reported - Counter(curriculum.proposed)
    per_skill = Counter(parse(outcome.instruction).skill for outcome in curriculum.reported)
    successes = Counter(
        parse(outcome.instruction).skill for outcome in curriculum.reported if outcome.success
    )
    assert summary["train_per_skill"] == {
        skill: {"episodes": count, "successes": successes[skill]}
        for skill, count in sorted(per_skill.items())
    }
    final = [(e["instruction"], e["success"]) for e in summary["eval"]["episodes"]]
    told = [(o.instruction, o.success) for o in curriculum.evaluated]
    assert told[-len(final) :] == final, "the learner's evaluations reach the curriculum"


def check_saved_state(summary: dict, curriculum: Curriculum, fresh: Curriculum) -> dict:
    """curriculum.json and the checkpoint hold the final state; it restores into a fresh one."""
    run_dir = Path(summary["run_dir"])
    state = json.loads((run_dir / "curriculum.json").read_text())
    assert state == json.loads(json.dumps(curriculum.state_dict()))
    assert not list(run_dir.glob("*.tmp"))
    _, _, payload = load_checkpoint(summary["checkpoint"])
    assert json.loads(json.dumps(payload["extra"]["curriculum"])) == state
    fresh.load_state_dict(state)
    assert fresh.state_dict() == curriculum.state_dict()
    assert fresh.propose_batch(30) == curriculum.propose_batch(30)
    return state


def scalars(run_dir: str) -> dict[str, list[float]]:
    """Every TensorBoard scalar of a run, by tag."""
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@pytest.mark.parametrize(
    ("name", "env_id", "vectorization"),
    [
        ("fixed", REACH, "sync"),
        ("lp", REACH, "sync"),
        ("lp", REACH, "async"),
        ("lp", REACH, "shared"),
        ("hand", MULTI, "shared"),
    ],
)
def test_ppo_trains_with_each_curriculum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, env_id: str, vectorization: str
) -> None:
    built = record_curricula(monkeypatch)
    args = ppo_args(tmp_path / "run", env_id=env_id, curriculum=name, vectorization=vectorization)
    summary = ppo.train(args)
    (curriculum,) = built
    assert summary["curriculum"] == name
    assert summary["train_episodes"] == 2 * (128 // EPISODE_STEPS), "dense reward: all truncated"
    check_bookkeeping(summary, curriculum, num_envs=2)

    tasks = task_set(env_id)
    assert set(curriculum.proposed) <= set(tasks)
    budget = episode_budget(env_id, args.total_timesteps, args.num_envs, args.max_episode_steps)
    assert budget == summary["train_episodes"] == 12, "no episode ends early here"
    fresh = make_curriculum(name, tasks, seed=12345, budget=budget)
    state = check_saved_state(summary, curriculum, fresh)
    assert state["name"] == name

    logged = scalars(summary["run_dir"])
    skills = set(summary["train_per_skill"])
    assert {f"charts/success_rate_{skill}" for skill in skills} <= set(logged)
    if name == "hand":
        assert summary["curriculum_state"] == {
            "stage": "reach",
            "stage_index": 0,
            "mastered": False,
        }
        assert skills == {"reach"}, "the first stage of the shipped curriculum is reach"
        assert set(logged["curriculum/stage"]) == {0.0}
    elif name == "lp":
        probabilities = summary["curriculum_state"]["skill_probabilities"]
        assert probabilities == pytest.approx({"reach": 1.0})
        assert logged["curriculum/p_reach"] == pytest.approx(
            [1.0] * len(logged["curriculum/p_reach"])
        )
        assert len(logged["curriculum/p_reach"]) == 2, "once per PPO update"
    else:
        assert summary["curriculum_state"] == {"tasks": len(tasks)}
        assert not any(tag.startswith("curriculum/") for tag in logged)


def test_hand_advances_through_its_own_toml_and_logs_the_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "stages.toml"
    toml.write_text(TWO_STAGES)
    built = record_curricula(monkeypatch)
    args = ppo_args(tmp_path / "run", curriculum="hand", hand_curriculum=str(toml))
    summary = ppo.train(args)
    (curriculum,) = built
    check_bookkeeping(summary, curriculum, num_envs=2)
    assert summary["curriculum_state"]["stage"] == "any"
    red = "move the gripper above the red block"
    assert curriculum.proposed[:2] == [red, red], "the first stage practises red only"
    fresh = make_curriculum("hand", task_set(REACH), seed=0, path=toml)
    assert check_saved_state(summary, curriculum, fresh)["stage"] == 1
    assert scalars(summary["run_dir"])["curriculum/stage"][-1] == 1.0


def test_sac_trains_with_lp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = record_curricula(monkeypatch)
    summary = sac.train(sac_args(tmp_path / "run", curriculum="lp"))
    (curriculum,) = built
    assert summary["curriculum"] == "lp" and summary["updates"] > 0
    assert summary["train_episodes"] == 2 * (100 // EPISODE_STEPS)
    check_bookkeeping(summary, curriculum, num_envs=2)
    check_saved_state(summary, curriculum, make_curriculum("lp", task_set(REACH), seed=7))
    logged = scalars(summary["run_dir"])
    assert "curriculum/p_reach" in logged and "charts/success_rate_reach" in logged


def test_curriculum_seed_defaults_to_the_run_seed() -> None:
    tasks = task_set(MULTI)
    for module in (ppo, sac):
        curriculum = common.make_training_curriculum(module.Args(env_id=MULTI, seed=5))
        assert curriculum.tasks == tuple(tasks)
        assert curriculum.propose_batch(20) == make_curriculum("fixed", tasks, 5).propose_batch(20)
        args = module.Args(env_id=MULTI, seed=5, curriculum_seed=6, curriculum_tasks="targets")
        curriculum = common.make_training_curriculum(args)
        assert curriculum.tasks == tuple(tasks), "MultiSkill is evaluated on every skill"
        assert curriculum.propose_batch(20) == make_curriculum("fixed", tasks, 6).propose_batch(20)


def test_online_budget_sizes_the_shipped_hand_windows() -> None:
    for module in (ppo, sac):
        args = module.Args(env_id=MULTI, curriculum="hand", total_timesteps=24_000, num_envs=3)
        hand = common.make_training_curriculum(args)
        assert [stage.window for stage in hand.stages] == [5, 5, 6, 6, 9], "60 = 3 * 8000 // 400"
        args.max_episode_steps = 40
        hand = common.make_training_curriculum(args)
        assert [stage.window for stage in hand.stages] == [48, 48, 60, 60, 90], "600 episodes"


def test_online_controls_aim_at_the_env_targets() -> None:
    args = ppo.Args(env_id=MULTI, curriculum="positive_control")
    assert common.make_training_curriculum(args).chain == (
        "reach",
        "lift",
        "push",
        "place",
        "stack",
        "unstack",
        "tower",
    )
    args = ppo.Args(env_id="GameOn/Lift-v0", curriculum="negative_control")
    with pytest.raises(ValueError, match="'negative_control' cannot train on GameOn/Lift-v0"):
        common.make_training_curriculum(args)


def test_hand_on_reach_fails_before_training(tmp_path: Path) -> None:
    for module, make_args in ((ppo, ppo_args), (sac, sac_args)):
        run_dir = tmp_path / module.ALGO
        with pytest.raises(ValueError, match="'hand' cannot train on GameOn/Reach-v0.*outside"):
            module.train(make_args(run_dir, curriculum="hand"))
        assert not run_dir.exists()
    # the shipped file by name works where every skill is accepted
    args = ppo.Args(env_id=MULTI, curriculum="hand", hand_curriculum=str(HAND_CURRICULUM_TOML))
    assert common.make_training_curriculum(args).stage_name == "reach"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"curriculum": "random"}, "unknown curriculum 'random'; accepted: fixed, hand, lp, vlm"),
        ({"curriculum": "vlm", "vlm_backend": "nope"}, "unknown VLM backend 'nope'"),
        ({"curriculum": "vlm", "vlm_backend": "replay"}, "needs a transcript"),
        ({"vlm_model": "gpt-4o-mini"}, "only read by the vlm curriculum"),
        ({"curriculum_tasks": "some"}, "accepted: all, targets"),
        ({"hand_curriculum": "stages.toml"}, "only read by the hand curriculum"),
        ({"curriculum": "hand", "hand_curriculum": "missing.toml"}, "no file at missing.toml"),
        ({"max_episode_steps": 0}, "max_episode_steps must be >= 1"),
    ],
)
def test_bad_curriculum_settings_raise_before_training(
    tmp_path: Path, overrides: dict, message: str
) -> None:
    for module, make_args in ((ppo, ppo_args), (sac, sac_args)):
        run_dir = tmp_path / module.ALGO
        with pytest.raises(ValueError, match=message):
            module.train(make_args(run_dir, **overrides))
        assert not run_dir.exists()
