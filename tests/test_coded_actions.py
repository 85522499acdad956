"""Coded actions for RL: the wrapper's action space and selection rule, a coded stack that
succeeds in one agent step, an unchanged continuous path, rejections that the episode survives,
the library reader, and tiny PPO and SAC runs with `--coded-skills templates`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import gameon.envs  # noqa: F401
from gameon import evaluation
from gameon.baselines import common, ppo, sac
from gameon.envs import oracle
from gameon.experimenter import coded_actions
from gameon.experimenter.coded_actions import (
    CodedActions,
    coded_skills_from_library,
    load_coded_skills,
    vector_env_steps,
)
from gameon.experimenter.coded_api import TEMPLATES
from gameon.experimenter.skills import CodedExecutor, default_library

STACK = "GameOn/Stack-v0"
REACH = "GameOn/Reach-v0"
RAISES = "def skill(blocks):\n    raise ValueError('boom')\n"
NAN_AFTER_THREE = "def skill(blocks):\n    wait(3)\n    send_action([float('nan'), 0, 0, 0, 0])\n"
HUGE = "def skill(blocks):\n    send_action([10 ** 400, 0, 0, 0, 0])\n"


def wrapped(coded_skills: dict[str, str], **kwargs: object) -> CodedActions:
    return CodedActions(gym.make(STACK), coded_skills, **kwargs)


def select(env: CodedActions, name: str) -> np.ndarray:
    """An action whose only positive score is `name`'s."""
    scores = [1.0 if n == name else -1.0 for n in env.names]
    return np.array([0.0] * env.continuous_size + scores, np.float32)


def test_action_space_gains_one_score_per_coded_skill() -> None:
    env = wrapped(TEMPLATES)
    assert env.names == ["reach", "lift", "place", "stack"]
    assert env.action_space.shape == (5 + 4,)
    np.testing.assert_array_equal(env.action_space.low, -np.ones(9, np.float32))
    np.testing.assert_array_equal(env.action_space.high, np.ones(9, np.float32))
    assert env.observation_space == env.unwrapped.observation_space
    with pytest.raises(ValueError, match="shape"):
        env.reset(seed=0)
        env.step(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="at least one coded skill"):
        wrapped({})
    env.close()


def test_selection_rule_is_the_largest_score_above_zero() -> None:
    env = wrapped({"a": RAISES, "b": RAISES})
    assert env.selection(np.array([0, 0, 0, 0, 0, 0.2, 0.5])) == "b"
    assert env.selection(np.array([0, 0, 0, 0, 0, 0.5, 0.5])) == "a"
    assert env.selection(np.array([0, 0, 0, 0, 0, 0.0, -0.1])) is None
    assert env.selection(np.array([0, 0, 0, 0, 0, -1.0, -0.1])) is None
    env.close()


def test_coded_stack_succeeds_in_one_agent_step() -> None:
    env = wrapped(TEMPLATES)
    env.reset(seed=1)
    _, reward, terminated, truncated, info = env.step(select(env, "stack"))
    assert info["coded_skill"] == "stack" and "rejection" not in info
    assert info["success"] and terminated and not truncated and reward == 1.0
    assert 1 < info["coded_steps"] == info["env_steps"] <= env.max_skill_steps
    unwrapped = env.unwrapped
    assert oracle.success(unwrapped.instruction, unwrapped.scene(), unwrapped.start_scene)
    assert env.selections == {"stack": 1} and not env.rejections
    env.close()


def test_selection_after_success_starts_no_skill(monkeypatch: pytest.MonkeyPatch) -> None:
    env = CodedActions(gym.make(STACK, terminate_on_success=False), TEMPLATES)
    env.reset(seed=1)
    _, _, terminated, _, info = env.step(select(env, "stack"))
    assert info["success"] and not terminated

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("no sandbox may start once the instruction succeeds")

    monkeypatch.setattr(coded_actions, "SandboxedSkill", refuse)
    _, reward, _, _, info = env.step(select(env, "lift"))
    assert info["coded_skill"] == "lift" and info["coded_steps"] == 0 and info["env_steps"] == 1
    assert info["success"] and reward == 1.0
    env.close()


def test_coded_action_stops_after_max_skill_steps() -> None:
    env = wrapped(TEMPLATES, max_skill_steps=5)
    env.reset(seed=1)
    _, _, terminated, _, info = env.step(select(env, "stack"))
    assert info["coded_steps"] == info["env_steps"] == 5 and not terminated
    env.close()


def test_continuous_path_matches_the_bare_env() -> None:
    bare, env = gym.make(STACK), wrapped(TEMPLATES)
    first, _ = bare.reset(seed=4)
    again, _ = env.reset(seed=4)
    np.testing.assert_array_equal(first["state"], again["state"])
    rng = np.random.default_rng(0)
    for _ in range(20):
        action = rng.uniform(-1, 1, 5).astype(np.float32)
        scores = -rng.uniform(0, 1, 4).astype(np.float32)
        scores[rng.integers(4)] = 0.0
        expected = bare.step(action)
        got = env.step(np.concatenate([action, scores]))
        for key in expected[0]:
            np.testing.assert_array_equal(expected[0][key], got[0][key])
        assert expected[1:4] == got[1:4]
        assert got[4]["env_steps"] == 1 and "coded_skill" not in got[4]
    bare.close()
    env.close()


def test_rejected_skill_is_reported_and_the_episode_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = wrapped({"bad": RAISES, "nan": NAN_AFTER_THREE})
    env.reset(seed=2)
    with caplog.at_level(logging.INFO, logger="gameon.coded_actions"):
        _, _, terminated, truncated, info = env.step(select(env, "bad"))
    assert info["rejection"] == "the skill raised ValueError: boom"
    assert info["coded_skill"] == "bad" and info["coded_steps"] == 0
    assert info["env_steps"] == 1 and not (terminated or truncated)
    assert any("'bad' rejected" in r.getMessage() for r in caplog.records)

    _, _, terminated, truncated, info = env.step(select(env, "nan"))
    assert info["rejection"].startswith("invalid action") and "nan" in info["rejection"]
    assert info["coded_steps"] == info["env_steps"] == 3 and not (terminated or truncated)
    _, _, _, _, info = env.step(np.zeros(7, np.float32))
    assert info["env_steps"] == 1 and "rejection" not in info
    assert env.rejections == {"bad": 1, "nan": 1}
    env.close()


def test_an_action_too_large_for_a_float_is_a_rejection_and_the_episode_goes_on() -> None:
    env = wrapped({"huge": HUGE})
    env.reset(seed=2)
    _, _, terminated, truncated, info = env.step(select(env, "huge"))
    assert info["rejection"].startswith("invalid action")
    assert "is not a finite number in [-1, 1]" in info["rejection"]
    assert info["env_steps"] == 1 and not (terminated or truncated)
    assert env.rejections == {"huge": 1}
    env.close()


def test_coded_skills_that_could_never_run_are_refused_up_front(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="coded skill 'bad' cannot run: import statements"):
        wrapped({"stack": TEMPLATES["stack"], "bad": "import os\ndef skill(blocks):\n    pass\n"})
    monkeypatch.setenv("PATH", str(tmp_path))  # neither bwrap nor unshare
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        wrapped(TEMPLATES)
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        load_coded_skills("templates")


def test_vector_env_steps_reads_final_info_where_an_episode_ended() -> None:
    info = {
        "env_steps": np.array([7, 0, 1]),
        "_env_steps": np.array([True, False, True]),
        "final_info": {"env_steps": np.array([0, 40, 0]), "_env_steps": np.array([0, 1, 0], bool)},
    }
    ended = np.array([False, True, False])
    np.testing.assert_array_equal(vector_env_steps(info, ended), [7, 40, 1])
    np.testing.assert_array_equal(vector_env_steps({}, np.zeros(2, bool)), [1, 1])


def test_coded_skills_from_library(tmp_path: Path) -> None:
    library = default_library()
    verification = {"trials": 5, "successes": 5}
    library.replace_executor("stack", CodedExecutor(TEMPLATES["stack"], verification))
    path = library.save(tmp_path / "library.json")
    assert coded_skills_from_library(path) == {"stack": TEMPLATES["stack"]}
    assert load_coded_skills("templates") == TEMPLATES
    default_library().save(tmp_path / "plain.json")
    with pytest.raises(ValueError, match="no coded skills"):
        load_coded_skills(str(tmp_path / "plain.json"))


def test_tiny_ppo_run_with_coded_skills(tmp_path: Path) -> None:
    args = ppo.Args(
        env_id=REACH,
        reward_mode="dense",
        total_timesteps=128,
        num_envs=2,
        num_steps=16,
        num_minibatches=4,
        update_epochs=2,
        eval_episodes_per_skill=1,
        run_dir=str(tmp_path / "ppo"),
        coded_skills="templates",
        coded_max_steps=60,
    )
    summary = ppo.train(args)
    coded = summary["coded_actions"]
    assert coded["skills"] == list(TEMPLATES) and coded["max_skill_steps"] == 60
    assert 128 <= summary["global_step"] < 128 + 2 * 60
    assert coded["agent_steps"] < summary["global_step"]
    record = json.loads((tmp_path / "ppo" / "eval.json").read_text())
    assert len(record["episodes"]) == 1 and record["episodes"][0]["length"] >= 1
    assert common.evaluate is evaluation.evaluate


def test_tiny_sac_run_with_coded_skills(tmp_path: Path) -> None:
    args = sac.Args(
        env_id=STACK,
        total_timesteps=200,
        learning_starts=100,
        batch_size=16,
        hidden=(32, 32),
        eval_episodes_per_skill=1,
        run_dir=str(tmp_path / "sac"),
        coded_skills="templates",
        coded_max_steps=40,
    )
    summary = sac.train(args)
    assert 200 <= summary["global_step"] < 200 + 2 * 40
    assert summary["coded_actions"]["agent_steps"] < summary["global_step"]
    assert summary["eval"]["episodes"][0]["length"] >= 1
