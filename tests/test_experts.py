"""Scripted experts solve their skills; the full 200-episode table is `-m slow`."""

import gymnasium as gym
import numpy as np
import pytest

from gameon.envs import ENV_IDS
from gameon.envs.experts import expert_success, make_expert

TARGET = {env_id: 0.95 for env_id in ENV_IDS} | {"GameOn/Tower-v0": 0.90}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_expert_solves_a_seeded_sample(env_id):
    assert expert_success(env_id, episodes=8) >= 7 / 8


def _actions(noise, seed, steps=30):
    env = gym.make("GameOn/Stack-v0")
    observation, _ = env.reset(seed=3)
    expert = make_expert(env, noise=noise, seed=seed)
    expert.reset()
    actions = []
    for _ in range(steps):
        actions.append(expert.act(observation))
        observation, *_ = env.step(actions[-1])
    return np.array(actions)


def test_noise_is_seeded_and_perturbs_the_actions():
    noisy = _actions(noise=0.2, seed=1)
    assert np.array_equal(noisy, _actions(noise=0.2, seed=1))
    assert not np.allclose(noisy, _actions(noise=0.0, seed=1))
    assert noisy.dtype == np.float32 and np.abs(noisy).max() <= 1.0


@pytest.mark.parametrize("noise", [-0.1, float("nan"), float("inf"), "0.1", True])
def test_bad_noise_is_refused(noise):
    env = gym.make("GameOn/Reach-v0")
    with pytest.raises(ValueError, match="expert noise must be a number >= 0"):
        make_expert(env, noise=noise)


def test_act_after_an_env_reset_without_expert_reset_raises():
    """The script was planned for the last episode's instruction: going on with it would record
    wrong actions for the new one."""
    env = gym.make("GameOn/MultiSkill-v0")
    observation, _ = env.reset(seed=0, options={"instruction": "pick up the red block"})
    expert = make_expert(env, seed=0)
    expert.reset()
    expert.act(observation)
    observation, _ = env.reset(seed=1, options={"instruction": "push the blue block forward"})
    with pytest.raises(RuntimeError, match=r"call expert.reset\(\) after each env.reset\(\)"):
        expert.act(observation)
    expert.reset()
    expert.act(observation)
    observation = env.unwrapped.set_instruction("pick up the green block")
    with pytest.raises(RuntimeError, match="given a new instruction"):
        expert.act(observation)
    expert.reset()
    expert.act(observation)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_expert_success_over_200_episodes(env_id):
    rate = expert_success(env_id, episodes=200)
    print(f"\n{env_id}: {rate:.1%} over 200 seeded episodes")
    assert rate >= TARGET[env_id]
