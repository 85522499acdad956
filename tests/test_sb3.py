"""TargetRelative and Stable-Baselines3: the wrapper's feature, SB3's env checker and learners.

The SB3 tests skip without stable-baselines3 (`pip install -e .[sb3]`); the slow one trains PPO
on GameOn/Reach-v0 with and without the wrapper (`python -m pytest -m slow tests/test_sb3.py`).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import gameon.envs  # noqa: F401  (registers the GameOn/ ids)
from gameon.envs import TargetRelative, target_relative
from gameon.envs.wrappers import TARGET_RELATIVE_KEY, TARGET_RELATIVE_SIZE

SB3_REASON = "stable-baselines3 not installed (pip install -e .[sb3])"


@pytest.fixture
def sb3():
    return pytest.importorskip("stable_baselines3", reason=SB3_REASON)


def rollout(env: gym.Env, steps: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Observations of random actions, resetting every 40 steps to see many instructions."""
    env.action_space.seed(seed)
    observation, _ = env.reset(seed=seed)
    observations = [observation]
    for step in range(1, steps):
        observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated or step % 40 == 0:
            observation, _ = env.reset()
        observations.append(observation)
    return observations


@pytest.mark.parametrize("blocks", [4, ("blue", "purple", "red")])
def test_target_relative_is_each_named_block_minus_the_hand(blocks):
    env = TargetRelative(gym.make("GameOn/MultiSkill-v0", blocks=blocks))
    env.action_space.seed(0)
    observation, _ = env.reset(seed=0)
    for step in range(300):
        if step % 30 == 0:
            observation, _ = env.reset()
        assert env.observation_space.contains(observation)
        scene = env.unwrapped.scene()
        expected = np.zeros((TARGET_RELATIVE_SIZE // 3, 3))
        for slot, colour in enumerate(env.unwrapped.instruction.objects):
            expected[slot] = scene.block_pos[scene.colours.index(colour)] - scene.tcp_pos
        np.testing.assert_allclose(observation[TARGET_RELATIVE_KEY].reshape(-1, 3), expected)
        observation, *_ = env.step(env.action_space.sample())


def test_target_relative_equals_the_learners_instruction_features_bitwise():
    policy = pytest.importorskip("gameon.policy", reason="the learners need torch")
    env = TargetRelative(gym.make("GameOn/MultiSkill-v0", blocks=4))
    observations = rollout(env, 400, seed=1)
    states = np.stack([o["state"] for o in observations])
    goals = np.stack([o["goal"] for o in observations])
    wrapped = np.stack([o[TARGET_RELATIVE_KEY] for o in observations])
    learners = policy.instruction_features(states, goals)
    assert learners.dtype == wrapped.dtype == np.float64
    assert learners.tobytes() == wrapped.tobytes()
    batched = target_relative(states, goals, env.colours)
    assert batched.tobytes() == wrapped.tobytes()


def test_target_relative_rejects_what_it_cannot_read():
    with pytest.raises(ValueError, match="obs_mode"):
        TargetRelative(gym.make("GameOn/Reach-v0", obs_mode="pixels"))
    env = gym.make("GameOn/Reach-v0", blocks=3)
    observation, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="4 blocks"):
        target_relative(
            observation["state"], observation["goal"], ("red", "green", "blue", "yellow")
        )


def test_target_relative_switches_instructions_and_rebuilds_from_its_spec():
    env = gym.wrappers.RecordEpisodeStatistics(TargetRelative(gym.make("GameOn/MultiSkill-v0")))
    env.reset(seed=0)
    observation = env.get_wrapper_attr("set_instruction")("stack the red block on the blue block")
    assert env.observation_space.contains(observation)
    scene = env.unwrapped.scene()
    expected = scene.block_pos[scene.colours.index("red")] - scene.tcp_pos
    np.testing.assert_allclose(observation[TARGET_RELATIVE_KEY][:3], expected)
    remade = gym.make(env.spec)
    assert isinstance(remade.env, TargetRelative)  # RecordEpisodeStatistics around it
    assert remade.observation_space == env.observation_space


def test_sb3_env_checker_accepts_the_wrapped_env(sb3):
    from stable_baselines3.common.env_checker import check_env

    for obs_mode in ("state", "state+pixels"):
        check_env(TargetRelative(gym.make("GameOn/Reach-v0", obs_mode=obs_mode)), warn=True)


def test_sb3_ppo_multi_input_policy_learns_from_target_relative(sb3):
    env = TargetRelative(gym.make("GameOn/Reach-v0"))
    model = sb3.PPO("MultiInputPolicy", env, n_steps=128, batch_size=64, n_epochs=1, seed=0)
    model.learn(256)
    extractors = model.policy.features_extractor.extractors
    assert set(extractors) == {"goal", "state", TARGET_RELATIVE_KEY}
    observation, _ = env.reset(seed=0)
    action, _ = model.predict(observation, deterministic=True)
    assert env.action_space.contains(action)


def reach_success(wrapped: bool, seed: int, steps: int, episodes: int) -> float:
    """SB3 PPO (defaults, observations normalised by VecNormalize as the GameOn PPO does) trained
    on GameOn/Reach-v0 with the dense reward; its deterministic success over `episodes`."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    def make(**kwargs):
        env = gym.make("GameOn/Reach-v0", reward_mode="dense", **kwargs)
        return TargetRelative(env) if wrapped else env

    train = VecNormalize(DummyVecEnv([lambda: make(terminate_on_success=False)]), norm_reward=False)
    model = PPO("MultiInputPolicy", train, seed=seed, device="cpu")
    model.learn(steps)
    test = VecNormalize(DummyVecEnv([make]), norm_reward=False, training=False)
    test.obs_rms = train.obs_rms
    test.seed(10_000 + seed)
    observation = test.reset()
    successes = []
    while len(successes) < episodes:
        action, _ = model.predict(observation, deterministic=True)
        observation, _, dones, infos = test.step(action)
        if dones[0]:
            successes.append(infos[0]["success"])
    return float(np.mean(successes))


@pytest.mark.slow
def test_sb3_ppo_reaches_with_target_relative_and_not_without(sb3):
    """Measured (seeds 1-3, 100k steps, 20 episodes): 100% wrapped, 5-10% unwrapped."""
    wrapped = reach_success(wrapped=True, seed=1, steps=100_000, episodes=20)
    unwrapped = reach_success(wrapped=False, seed=1, steps=100_000, episodes=20)
    print(f"SB3 PPO, Reach-v0, 100k steps: wrapped {wrapped:.0%}, unwrapped {unwrapped:.0%}")
    assert wrapped >= 0.8
    assert wrapped - unwrapped >= 0.5
