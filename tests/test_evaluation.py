"""The shared evaluation suite (`gameon.evaluation`)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import gameon.evaluation as evaluation


def test_evaluation_suite_closes_the_env_it_reads_the_colours_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The suite made an env for its block colours and never closed it (one leaked MuJoCo env
    per evaluation of every learner)."""
    made: list[gym.Env] = []
    closed: list[gym.Env] = []
    real_make = gym.make

    def make(env_id: str, **kwargs: object) -> gym.Env:
        env = real_make(env_id, **kwargs)
        close = env.close

        def tracked_close() -> None:
            closed.append(env)
            close()

        env.close = tracked_close  # type: ignore[method-assign]
        made.append(env)
        return env

    monkeypatch.setattr(gym, "make", make)
    tasks = evaluation.evaluation_suite("GameOn/Reach-v0", episodes_per_skill=2)
    assert [task.seed for task in tasks] == [evaluation.SUITE_SEED, evaluation.SUITE_SEED + 1]
    assert made and closed == made
