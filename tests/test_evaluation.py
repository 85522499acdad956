"""The shared evaluation suite (`gameon.evaluation`)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
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


def test_an_evaluation_stopped_midway_leaves_no_partial_video(tmp_path: Path) -> None:
    """The video was streamed into its own name, so an evaluation stopped by an error or Ctrl-C
    left a video of part of the suite there, named as the whole evaluation's."""
    pytest.importorskip("imageio_ffmpeg")
    video = tmp_path / "videos" / "eval_100.mp4"
    steps = 0

    def policy(observation: dict[str, np.ndarray]) -> np.ndarray:
        nonlocal steps
        steps += 1
        if steps == 5:
            raise KeyboardInterrupt
        return np.zeros(5, np.float32)

    suite = evaluation.evaluation_suite("GameOn/Reach-v0", episodes_per_skill=1)
    kwargs = {"width": 32, "height": 32}
    with pytest.raises(KeyboardInterrupt):
        evaluation.evaluate(policy, "GameOn/Reach-v0", suite=suite, env_kwargs=kwargs, video=video)
    assert list(video.parent.iterdir()) == []

    iio = pytest.importorskip("imageio.v3")
    steps = -1000
    report = evaluation.evaluate(
        policy, "GameOn/Reach-v0", suite=suite, env_kwargs=kwargs, video=video
    )
    assert [path.name for path in video.parent.iterdir()] == ["eval_100.mp4"]
    frames = np.asarray(iio.imread(video, index=None))
    assert len(frames) == report.episodes[0].length and frames.shape[1:] == (32, 32, 3)
