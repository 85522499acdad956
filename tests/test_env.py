"""Behaviour of the registered GameOn/ Gymnasium environments, as a user of `gym.make` sees it."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import itertools
import math
import os
import pickle
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from gameon.envs import ENV_IDS, ENV_SKILLS, StackingEnv, TargetRelative, language, oracle
from gameon.envs.experts import make_expert
from gameon.envs.language import COLOURS, GOAL_SIZE, Instruction, encode, parse
from gameon.envs.layout import MIN_SPACING, PLACE_OFFSET, PUSH_LANE
from gameon.envs.oracle import BLOCK_SIZE, DIRECTION_VECTORS, SIDE_VECTORS
from gameon.envs.world import (
    BLOCK_AREA_HIGH,
    BLOCK_AREA_LOW,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
    scene_from_state,
    state_size,
)
from gameon.evaluation import EvalTask, evaluate

SINGLE_SKILL_IDS = [env_id for env_id in ENV_IDS if len(ENV_SKILLS[env_id][0]) == 1]
STACK = "GameOn/Stack-v0"
MULTI = "GameOn/MultiSkill-v0"
NOOP = np.array([0.0, 0.0, 0.0, 0.0, -1.0])
"""Hold the pose with the gripper open."""


@pytest.fixture
def make_env():
    """`gym.make` that closes every env it made when the test ends."""
    made = []

    def make(env_id=STACK, **kwargs):
        env = gym.make(env_id, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def assert_same_obs(a, b):
    """Bitwise equality of two observation dicts."""
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert a[key].tobytes() == b[key].tobytes(), f"observation {key!r} differs"


def assert_same_scene(a, b):
    for field in dataclasses.fields(oracle.SceneState):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), field.name
        else:
            assert x == y, field.name


def scene_of(env, obs):
    return scene_from_state(obs["state"], env.unwrapped.colours)


def inside(point, low, high, margin=0.0):
    return bool(np.all(point >= low - margin) and np.all(point <= high + margin))


def rollout(env, seed, actions):
    """All the env returns for a seeded reset and an action sequence (resetting on episode end)."""
    obs, info = env.reset(seed=seed)
    record = [(obs, None, False, False, info)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        record.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            obs, info = env.reset()
            record.append((obs, None, False, False, info))
    return record


def assert_same_rollout(first, second):
    assert len(first) == len(second)
    for (obs_a, *rest_a), (obs_b, *rest_b) in zip(first, second, strict=True):
        assert_same_obs(obs_a, obs_b)
        assert rest_a == rest_b


# 1. Registration and the Gymnasium API checker


def test_env_ids_are_exactly_the_registered_gameon_envs():
    registered = {env_id for env_id in gym.registry if env_id.startswith("GameOn/")}
    assert registered == set(ENV_IDS)


def test_the_package_exports_what_the_readme_uses_from_it():
    import gameon.envs

    exported = {"ENV_IDS", "ENV_SKILLS", "StackingEnv", "TargetRelative", "make_vec", "parse"}
    assert exported <= set(gameon.envs.__all__)
    assert all(hasattr(gameon.envs, name) for name in gameon.envs.__all__)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_registered_env_passes_check_env_without_warnings(make_env, env_id):
    env = make_env(env_id)
    assert env.spec.max_episode_steps <= 400
    assert env.spec.max_episode_steps == ENV_SKILLS[env_id][1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []


def test_make_wraps_in_time_limit_only_and_a_step_before_reset_says_what_to_do(make_env):
    env = make_env("GameOn/Reach-v0", render_mode="rgb_array")
    assert isinstance(env, gym.wrappers.TimeLimit) and env.env is env.unwrapped
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step(env.action_space.sample())
    with pytest.raises(RuntimeError, match=r"call reset\(\) before render\(\)"):
        env.render()
    env.reset(seed=0)
    assert env.render().shape == (240, 320, 3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"obs_mode": "state+pixels"},
        {"obs_mode": "pixels", "render_mode": "rgb_array", "width": 64, "height": 48},
    ],
    ids=["state+pixels", "pixels+render"],
)
def test_pixel_modes_pass_check_env_without_warnings(make_env, kwargs):
    env = make_env("GameOn/Reach-v0", **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"reward_mode": "shaped"}, ("'shaped'", "sparse, dense")),
        ({"obs_mode": "rgb"}, ("'rgb'", "state, state+pixels, pixels")),
        ({"camera": "side"}, ("'side'", "front, top, wrist")),
        ({"blocks": 1}, ("2 to 5",)),
        ({"blocks": ("red", "pink")}, ("'pink'", "red, green, blue, yellow, purple")),
        ({"width": 4}, ("width", "16 to 1024")),
        ({"width": 100.5}, ("width must be a whole number of pixels", "100.5")),
        ({"pixel_size": "84"}, ("pixel_size must be a whole number of pixels", "got '84'")),
        ({"blocks": 3.0}, ("a number of blocks (2 to 5) or a list of colours", "3.0")),
        ({"skills": []}, ("at least one skill", "reach, lift, push")),
        ({"skills": "reach"}, ("a list of skill names", "'reach'")),
        ({"skills": None}, ("a list of skill names", "None")),
        # A set's order follows string hashes, which differ between processes (and vector env
        # workers): the state layout and seeded instructions would too.
        ({"skills": {"reach", "lift"}}, ("a list or tuple, not a set", "{'")),
        ({"blocks": {"red", "green"}}, ("a list or tuple, not a set", "{'")),
        ({"blocks": (c for c in ("red", "green"))}, ("list of colours", "generator")),
        ({"terminate_on_success": "False"}, ("True or False", "'False'")),
    ],
)
def test_constructor_rejects_bad_options_naming_accepted_values(kwargs, expected):
    with pytest.raises(ValueError) as excinfo:
        gym.make(STACK, **kwargs)
    for text in expected:
        assert text in str(excinfo.value)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"obs_mod": "pixels"}, "unknown keyword argument 'obs_mod' (did you mean 'obs_mode'?)"),
        ({"instruction": "lift red"}, "reset(options={'instruction': text})"),
        ({"seed": 1}, "unknown keyword argument 'seed' (a seed goes to reset(seed=...))"),
        ({"max_steps": 9}, "'max_steps' (did you mean 'max_episode_steps'?)"),
        ({"max_episode_step": 9}, "'max_episode_step' (did you mean 'max_episode_steps'?)"),
    ],
)
def test_an_unknown_keyword_argument_is_named_with_the_accepted_ones(kwargs, expected):
    with pytest.raises(TypeError) as excinfo:
        gym.make(STACK, **kwargs)
    assert expected in str(excinfo.value)
    accepted = [name for name in inspect.signature(StackingEnv).parameters if name != "unknown"]
    assert f"accepted: {', '.join(accepted)} (and gym.make's own" in str(excinfo.value)


def test_unsupported_render_mode_is_rejected():
    # gym.make wraps "human" in HumanRendering, so ask the env class directly.
    with pytest.raises(ValueError, match="'human'; accepted: rgb_array"):
        StackingEnv(render_mode="human")
    with (
        pytest.warns(UserWarning, match="not in the possible render_modes"),  # Gymnasium's own
        pytest.raises(ValueError, match="through gym.make, human and rgb_array_list"),
    ):
        gym.make("GameOn/Stack-v0", render_mode="rgb")


def test_target_relative_over_a_flattened_observation_says_to_wrap_it_first(make_env):
    """The error said only to make the env with obs_mode 'state', which the env already had."""
    flat = gym.wrappers.FlattenObservation(make_env("GameOn/Reach-v0"))
    with pytest.raises(ValueError) as excinfo:
        TargetRelative(flat)
    assert "before any wrapper that flattens the observation" in str(excinfo.value)
    assert str(excinfo.value).endswith(f"got observation space {flat.observation_space}")


def test_tower_needs_three_blocks():
    with pytest.raises(ValueError, match="needs 3 blocks"):
        gym.make("GameOn/Tower-v0", blocks=2)


# 2. Vectorised envs


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_steps_with_batched_actions(mode):
    envs = gym.make_vec(MULTI, num_envs=2, vectorization_mode=mode)
    try:
        obs, infos = envs.reset(seed=0)
        assert obs["state"].shape == (2, state_size(3))
        assert obs["goal"].shape == (2, GOAL_SIZE)
        assert infos["success"].shape == (2,)
        rng = np.random.default_rng(0)
        for _ in range(4):
            actions = rng.uniform(-1, 1, (2, 5)).astype(np.float32)
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            assert obs["state"].shape == (2, state_size(3))
            assert np.isfinite(obs["state"]).all()
            assert rewards.shape == terminated.shape == truncated.shape == (2,)
            assert infos["success"].shape == (2,) and infos["success"].dtype == bool
            assert len(infos["instruction"]) == 2
    finally:
        envs.close()


# 3. Instructions


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("stack the red block on the blue block", "stack the red block on the blue block"),
        ("Put red on top of the blue block.", "stack the red block on the blue block"),
        ("slide the green block to the left", "push the green block to the left"),
        ("take the blue block off the red block", "unstack the blue block from the red block"),
        (
            "build a tower with blue, red and green",
            "build a tower of blue, red and green from the bottom up",
        ),
    ],
)
def test_multiskill_reset_takes_the_given_instruction(make_env, text, canonical):
    env = make_env(MULTI)
    obs, info = env.reset(seed=0, options={"instruction": text})
    assert info["instruction"] == canonical
    assert env.unwrapped.instruction == parse(text)
    assert obs["goal"].dtype == np.float32
    assert np.array_equal(obs["goal"], encode(parse(text)))
    for _ in range(3):
        obs, *_, info = env.step(NOOP)
        assert info["instruction"] == canonical
        assert np.array_equal(obs["goal"], encode(parse(text)))


def test_reset_accepts_an_instruction_object(make_env):
    env = make_env(MULTI)
    instruction = Instruction("place", ("red", "green"), "behind")
    obs, info = env.reset(seed=0, options={"instruction": instruction})
    assert info["instruction"] == "place the red block behind the green block"
    assert np.array_equal(obs["goal"], encode(instruction))


@pytest.mark.parametrize("env_id", SINGLE_SKILL_IDS)
def test_single_skill_env_samples_a_new_instruction_each_episode(make_env, env_id):
    (skill,) = ENV_SKILLS[env_id][0]
    env = make_env(env_id)
    over_seeds, over_episodes = set(), set()
    for episode in range(10):
        for seen, (obs, info) in (
            (over_seeds, env.reset(seed=episode)),
            (over_episodes, env.reset(seed=0) if episode == 0 else env.reset()),
        ):
            instruction = parse(info["instruction"])
            assert str(instruction) == info["instruction"]
            assert instruction.skill == skill
            assert set(instruction.objects) <= set(env.unwrapped.colours)
            assert np.array_equal(obs["goal"], encode(instruction))
            seen.add(info["instruction"])
    assert len(over_seeds) > 1 and len(over_episodes) > 1


def test_multiskill_samples_several_skills(make_env):
    env = make_env(MULTI)
    skills = {parse(env.reset(seed=seed)[1]["instruction"]).skill for seed in range(30)}
    assert len(skills) >= 4


def test_a_skill_listed_twice_is_sampled_twice_as_often(make_env):
    env = make_env(MULTI, skills=["reach", "reach", "lift"])
    env.reset(seed=0)
    skills = [parse(env.reset()[1]["instruction"]).skill for _ in range(600)]
    assert set(skills) == {"reach", "lift"}
    assert 0.6 < skills.count("reach") / len(skills) < 0.73  # 2/3, binomial sd 0.019


@pytest.mark.parametrize(
    ("env_id", "options", "expected"),
    [
        (STACK, {"instruction": "pick up the red block"}, ("stack", "'lift'", MULTI)),
        (
            MULTI,
            {"instruction": "stack the pink block on the blue block"},
            ("'pink'", "accepted colours: red, green, blue, yellow, purple"),
        ),
        (MULTI, {"instruction": "pick up the yellow block"}, ("yellow", "red, green, blue")),
        (MULTI, {"instrution": "pick up the red block"}, ("'instrution'", "accepted: instruction")),
        (
            MULTI,
            {"instruction": "dance with the red block"},
            ("cannot parse", "stack the <colour> block on the <colour> block", "accepted colours"),
        ),
        (
            MULTI,
            {"instruction": "push the red block upward"},
            ("'upward'", "left, right, forward, backward"),
        ),
        (MULTI, {"instruction": "stack the red block on the red block"}, ("more than once",)),
        (MULTI, {"instruction": 42}, ("text or an Instruction", "int")),
        (MULTI, "instruction", ("reset options must be a dict", "'instruction'")),
        (MULTI, ["instruction"], ("reset options must be a dict", "['instruction']")),
        (MULTI, [], ("reset options must be a dict", "[]")),
        (MULTI, "", ("reset options must be a dict", "''")),
    ],
    ids=[
        "other-skill",
        "unknown-colour",
        "colour-not-in-scene",
        "unknown-option",
        "unparsable",
        "unknown-direction",
        "repeated-block",
        "not-text",
        "options-a-string",
        "options-a-list",
        "options-an-empty-list",
        "options-an-empty-string",
    ],
)
def test_bad_reset_options_raise_naming_accepted_values(make_env, env_id, options, expected):
    env = make_env(env_id)
    with pytest.raises(ValueError) as excinfo:
        env.reset(seed=0, options=options)
    for text in expected:
        assert text in str(excinfo.value)
    # The env stays usable.
    env.reset(seed=0)
    obs, *_, info = env.step(NOOP)
    assert np.isfinite(obs["state"]).all() and not info["sim_unstable"]


@pytest.mark.parametrize(
    ("instruction", "expected"),
    [
        (None, "needs an instruction: text or an Instruction"),
        (3, "text or an Instruction, got int"),
        ("fly to the moon", "accepted forms"),
    ],
    ids=["none", "not-text", "unparsable"],
)
def test_set_instruction_refuses_what_is_not_an_instruction_and_keeps_the_old_one(
    make_env, instruction, expected
):
    env = make_env(MULTI)
    env.reset(seed=0, options={"instruction": "pick up the red block"})
    before = env.unwrapped.start_scene
    with pytest.raises(ValueError, match=expected):
        env.unwrapped.set_instruction(instruction)
    assert env.unwrapped.start_scene is before
    assert env.step(NOOP)[-1]["instruction"] == "pick up the red block"
    observation = env.unwrapped.set_instruction("stack red on blue")
    assert np.array_equal(observation["goal"], encode(parse("stack red on blue")))
    assert env.step(NOOP)[-1]["instruction"] == "stack the red block on the blue block"


# 4. Info keys


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_keys_after_reset_and_every_step(make_env, env_id):
    env = make_env(env_id)
    rng = np.random.default_rng(1)

    def check(info):
        assert {"success", "is_success", "instruction", "sim_unstable"} <= info.keys()
        assert isinstance(info["success"], bool) and info["success"] == info["is_success"]
        assert isinstance(info["instruction"], str) and info["instruction"]
        assert info["sim_unstable"] is False

    _, info = env.reset(seed=0)
    check(info)
    for _ in range(20):
        _, reward, terminated, truncated, info = env.step(rng.uniform(-1, 1, 5))
        check(info)
        assert reward == float(info["success"])  # sparse by default
        assert terminated == info["success"]  # terminate_on_success by default
        if terminated or truncated:
            _, info = env.reset()
            check(info)


def test_dense_reward_is_in_unit_interval_and_one_exactly_on_success(make_env):
    env = make_env(MULTI, reward_mode="dense")
    observation, _ = env.reset(seed=0)
    expert = make_expert(env)
    expert.reset()
    rewards = []
    for _ in range(env.spec.max_episode_steps):
        observation, reward, terminated, truncated, info = env.step(expert.act(observation))
        rewards.append(reward)
        assert isinstance(reward, float) and 0.0 <= reward <= 1.0
        assert (reward == 1.0) == info["success"]
        if terminated or truncated:
            break
    # The scripted expert solves the seeded episode: the success step pays exactly 1.0 and ends
    # the episode, after shaping that rose towards it.
    assert info["success"] and info["is_success"]
    assert terminated and not truncated
    assert rewards[-1] == 1.0
    assert rewards[0] < rewards[-2] < 1.0


# 5. Bad actions


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (np.zeros(4), "got (4,)"),
        (np.zeros((2, 5)), "got (2, 5)"),
        (np.float64(0.5), "got ()"),
        (np.array([0.0, np.nan, 0.0, 0.0, 0.0]), "finite"),
        (np.array([np.inf, 0.0, 0.0, 0.0, 0.0]), "finite"),
        (np.array([0.0, 0.0, 0.0, 0.0, -np.inf]), "finite"),
        (np.array([0.5j, 0.0, 0.0, 0.0, 0.0]), "real numbers"),
        ("0.1 0.0 0.0 0.0 1.0", "real numbers"),
        ({"vx": 0.1}, "real numbers"),
        ([0.0, [0.0, 1.0], 0.0, 0.0, 0.0], "real numbers"),
    ],
    ids=[
        "shape-4",
        "shape-2x5",
        "scalar",
        "nan",
        "inf",
        "-inf",
        "complex",
        "text",
        "dict",
        "ragged",
    ],
)
def test_bad_action_raises_and_leaves_no_trace(make_env, action, expected):
    env, reference = make_env(), make_env()
    env.reset(seed=0)
    reference.reset(seed=0)
    with pytest.raises(ValueError) as excinfo:
        env.step(action)
    message = str(excinfo.value)
    assert expected in message
    if "got (" in expected:
        assert "shape (5,)" in message
    # The rejected action neither moved the simulation nor counted as a step.
    good = np.array([0.5, -0.5, 0.2, 0.1, 1.0])
    assert_same_obs(env.step(good)[0], reference.step(good)[0])
    assert env._elapsed_steps == reference._elapsed_steps == 1


@pytest.mark.parametrize(
    "make_actions",
    [
        lambda rng: rng.uniform(-5, 5, (12, 5)),
        lambda rng: rng.uniform(-1e6, 1e6, (12, 5)),
        lambda rng: np.full((12, 5), 5.0),
        lambda rng: np.tile([1e6, -1e6, 1e6, -1e6, 1e6], (12, 1)),
    ],
    ids=["uniform-5", "uniform-1e6", "all-5", "alternating-1e6"],
)
def test_out_of_range_actions_are_clipped(make_env, make_actions):
    raw = make_actions(np.random.default_rng(3))
    assert np.abs(raw).max() > 1
    clipped = np.clip(raw, -1.0, 1.0)
    assert_same_rollout(rollout(make_env(), 5, raw), rollout(make_env(), 5, clipped))


def test_list_actions_are_accepted(make_env):
    env, reference = make_env(), make_env()
    env.reset(seed=0)
    reference.reset(seed=0)
    action = [0.2, 0.0, -0.1, 0.0, 1.0]
    assert_same_obs(env.step(action)[0], reference.step(np.array(action))[0])


# 6. Determinism


@pytest.mark.parametrize("env_id", [STACK, MULTI])
@pytest.mark.parametrize("reward_mode", ["sparse", "dense"])
def test_same_seed_and_actions_give_identical_rollouts(make_env, env_id, reward_mode):
    actions = np.random.default_rng(123).uniform(-1, 1, (50, 5))
    first = rollout(make_env(env_id, reward_mode=reward_mode), 11, actions)
    assert_same_rollout(first, rollout(make_env(env_id, reward_mode=reward_mode), 11, actions))
    # An env that already ran another episode reproduces the rollout too.
    reused = make_env(env_id, reward_mode=reward_mode)
    rollout(reused, 99, actions[::-1])
    assert_same_rollout(first, rollout(reused, 11, actions))
    for _, reward, *_ in first[1:]:
        assert reward is None or (isinstance(reward, float) and math.isfinite(reward))


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_env_continues_exactly_as_the_original(make_env, how):
    """A copy made mid-episode, after a render, steps, renders and resets as the original does."""
    env = make_env("GameOn/Tower-v0", reward_mode="dense", render_mode="rgb_array", width=64)
    obs = env.reset(seed=3)[0]
    expert = make_expert(env, noise=0.1, seed=3)
    expert.reset()
    for _ in range(40):
        obs = env.step(expert.act(obs))[0]
    env.render()
    copied = copy.deepcopy(env) if how == "deepcopy" else pickle.loads(pickle.dumps(env))
    try:
        actions = np.random.default_rng(0).uniform(-1, 1, (60, 5))
        assert_same_rollout([env.step(a) for a in actions], [copied.step(a) for a in actions])
        assert np.array_equal(env.render(), copied.render())
        assert_same_rollout(rollout(env, 5, actions), rollout(copied, 5, actions))
    finally:
        copied.close()


@pytest.mark.parametrize("seed", [np.int64(7), np.uint8(7), np.arange(10)[7]])
def test_a_numpy_integer_seed_seeds_as_the_same_int_does(make_env, seed):
    """Seeds drawn with np.random or taken from a seed array are NumPy integers."""
    env, reference = make_env(MULTI), make_env(MULTI)
    obs, info = env.reset(seed=seed)
    expected_obs, expected_info = reference.reset(seed=7)
    assert_same_obs(obs, expected_obs)
    assert info == expected_info
    assert type(env.unwrapped.np_random_seed) is int and env.unwrapped.np_random_seed == 7


@pytest.mark.parametrize(
    "seed", [True, np.bool_(False), 1.0, np.float64(2.0), -1, np.int64(-1), "1"]
)
def test_a_seed_that_is_not_a_whole_number_from_zero_is_refused_naming_the_accepted_forms(
    make_env, seed
):
    env = make_env()
    with pytest.raises(ValueError) as excinfo:
        env.reset(seed=seed)
    assert str(excinfo.value) == (
        "seed must be None or a whole number >= 0 (a Python or NumPy integer, not a bool), "
        f"got {seed!r}"
    )


def test_different_seeds_give_different_layouts(make_env):
    env = make_env(STACK)
    layouts = [scene_of(env, env.reset(seed=seed)[0]).block_pos for seed in range(5)]
    for a, b in itertools.combinations(layouts, 2):
        assert not np.allclose(a, b, atol=1e-3)


def test_unseeded_resets_continue_the_seeded_stream(make_env):
    first, second = make_env(MULTI), make_env(MULTI)
    first.reset(seed=7)
    second.reset(seed=7)
    layouts = []
    for _ in range(3):
        obs_a, info_a = first.reset()
        obs_b, info_b = second.reset()
        assert_same_obs(obs_a, obs_b)
        assert info_a == info_b
        layouts.append(scene_of(first, obs_a).block_pos)
    for a, b in itertools.combinations(layouts, 2):
        assert not np.allclose(a, b, atol=1e-3)


# 7. Unstable simulation


def _huge_velocity(env):
    env.world.data.qvel[:] = 1e12


def _huge_force(env):
    env.world.data.xfrc_applied[:] = 1e12


def _huge_timestep(env):
    model = env.world.model
    old = model.opt.timestep
    model.opt.timestep = 1.0
    return lambda: setattr(model.opt, "timestep", old)


def _nan_position(env):
    env.world.data.qpos[env.world.block_qpos[0, 0]] = np.nan


PERTURBATIONS = [_huge_velocity, _huge_force, _huge_timestep, _nan_position]


@pytest.mark.parametrize("perturb", PERTURBATIONS, ids=lambda f: f.__name__.strip("_"))
def test_unstable_simulation_truncates_and_reset_recovers(make_env, perturb):
    env = make_env(STACK)
    env.reset(seed=0)
    for _ in range(3):
        env.step(NOOP)
    restore = perturb(env.unwrapped)
    obs, reward, terminated, truncated, info = env.step(NOOP)
    if restore is not None:
        restore()
    assert truncated is True and terminated is False
    assert info["sim_unstable"] is True
    assert info["success"] is False and info["is_success"] is False
    assert reward == 0.0
    assert env.observation_space.contains(obs)
    assert np.isfinite(obs["state"]).all()

    # reset() recovers, and the instability leaves no trace in the next episode.
    fresh = make_env(STACK)
    actions = np.random.default_rng(2).uniform(-1, 1, (5, 5))
    recovered = rollout(env, 3, actions)
    assert_same_rollout(recovered, rollout(fresh, 3, actions))
    for obs, _, _, truncated, info in recovered:
        assert not truncated and info["sim_unstable"] is False
        assert np.isfinite(obs["state"]).all()


def _shares_memory(a, b):
    return any(np.shares_memory(x, y) for x in a.values() for y in b.values())


@pytest.mark.filterwarnings("ignore:.*share an object")
def test_unstable_step_returns_fresh_observation_data(make_env):
    env = make_env(STACK)
    env.reset(seed=0)
    previous, *_ = env.step(NOOP)
    _huge_velocity(env.unwrapped)
    obs, *_, info = env.step(NOOP)
    assert info["sim_unstable"]
    assert obs is not previous and not _shares_memory(obs, previous)


def test_a_caller_changing_its_observation_does_not_change_what_the_env_returns_later(make_env):
    """The unstable step and set_instruction return the last good observation as the env saw it,
    not the arrays the caller was given and then normalised in place."""
    env = make_env(MULTI, obs_mode="state+pixels")
    obs, _ = env.reset(seed=0)
    seen = {key: value.copy() for key, value in obs.items()}
    for value in obs.values():
        value[...] = 0
    switched = env.unwrapped.set_instruction("pick up the red block")
    assert np.array_equal(switched["state"], seen["state"])
    assert np.array_equal(switched["pixels"], seen["pixels"])

    obs, *_ = env.step(NOOP)
    seen = {key: value.copy() for key, value in obs.items()}
    obs["state"][:] = -5.0
    _huge_velocity(env.unwrapped)
    unstable, *_, info = env.step(NOOP)
    assert info["sim_unstable"]
    assert all(np.array_equal(unstable[key], seen[key]) for key in seen)


def test_step_and_reset_return_fresh_observation_data(make_env):
    env = make_env(STACK, obs_mode="state+pixels")
    previous, _ = env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(NOOP)
        assert not _shares_memory(obs, previous)
        previous = obs


def test_editing_the_reset_observation_does_not_change_the_start_scene(make_env):
    env = make_env("GameOn/Push-v0")
    obs, _ = env.reset(seed=0)
    start = env.unwrapped.start_scene.block_pos.copy()
    obs["state"] += 1.0
    assert np.array_equal(env.unwrapped.start_scene.block_pos, start)


# 8. Robustness under random and extreme actions

EXTREME_ACTIONS = [
    np.ones(5),
    -np.ones(5),
    np.array([1.0, -1.0, 1.0, -1.0, 1.0]),
    np.array([-1.0, 1.0, -1.0, 1.0, -1.0]),
    np.full(5, 1e6),
    np.full(5, -1e6),
    np.array([1e6, -1e6, 1e6, -1e6, 1e6]),
    np.array([-1e6, 1e6, -1e6, 1e6, -1e6]),
]
EXTREME_HOLD = 20
"""Each env repeats an extreme action for this many of its steps before moving to the next."""


def hammer(total_steps, seed=0):
    """Step every registered env round-robin with random and extreme actions; return #episodes."""
    rng = np.random.default_rng(seed)
    envs = [gym.make(env_id) for env_id in ENV_IDS]
    episodes = 0
    try:
        for k, env in enumerate(envs):
            env.reset(seed=seed + k)
        for n in range(total_steps):
            env = envs[n % len(envs)]
            draw = rng.random()
            if draw < 0.5:
                action = rng.uniform(-1, 1, 5)
            elif draw < 0.6:
                action = rng.uniform(-1e6, 1e6, 5)
            else:
                block = n // (len(envs) * EXTREME_HOLD)
                action = EXTREME_ACTIONS[block % len(EXTREME_ACTIONS)]
            obs, reward, terminated, truncated, info = env.step(action)
            assert np.isfinite(obs["state"]).all(), (n, env.spec.id, action)
            assert env.observation_space.contains(obs), (n, env.spec.id, action)
            assert math.isfinite(reward)
            assert not info["sim_unstable"], (n, env.spec.id, action)
            if terminated or truncated:
                episodes += 1
                env.reset()
    finally:
        for env in envs:
            env.close()
    return episodes


def test_random_and_extreme_actions_short_run():
    assert hammer(5_000) > 0


@pytest.mark.slow
def test_random_and_extreme_actions_100k_steps():
    assert hammer(100_000, seed=1) > 100


# 9. Pixels and rendering


def test_pixel_observation_is_an_84px_image_that_follows_the_arm(make_env):
    env = make_env(STACK, obs_mode="pixels")
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"goal", "pixels"}
    pixels = obs["pixels"]
    assert pixels.shape == (84, 84, 3) and pixels.dtype == np.uint8
    assert pixels.min() < pixels.max()
    assert env.observation_space.contains(obs)
    for _ in range(10):
        obs, *_ = env.step(np.array([0.0, 1.0, 1.0, 0.0, -1.0]))
    assert not np.array_equal(obs["pixels"], pixels)


def test_state_plus_pixels_state_matches_state_mode(make_env):
    both, state_only = make_env(obs_mode="state+pixels", pixel_size=32), make_env()
    obs_both, _ = both.reset(seed=4)
    obs_state, _ = state_only.reset(seed=4)
    assert obs_both["pixels"].shape == (32, 32, 3)
    for _ in range(3):
        assert np.array_equal(obs_both["state"], obs_state["state"])
        assert np.array_equal(obs_both["goal"], obs_state["goal"])
        obs_both, *_ = both.step(NOOP)
        obs_state, *_ = state_only.step(NOOP)


def test_render_rgb_array_has_the_requested_size(make_env):
    env = make_env(STACK, render_mode="rgb_array", width=160, height=120)
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (120, 160, 3) and frame.dtype == np.uint8
    assert frame.min() < frame.max()


def test_render_without_render_mode_returns_none(make_env):
    env = make_env(STACK)
    env.reset(seed=0)
    assert env.render() is None


def test_cameras_show_different_views(make_env):
    frames = {}
    for camera in ("front", "top", "wrist"):
        env = make_env(STACK, render_mode="rgb_array", camera=camera, width=64, height=48)
        env.reset(seed=0)
        frames[camera] = env.render()
    for a, b in itertools.combinations(frames, 2):
        assert not np.array_equal(frames[a], frames[b]), (a, b)


@pytest.mark.parametrize(
    ("set_env", "expected"),
    [
        ({}, "egl"),
        ({"MUJOCO_GL": "disable"}, "disable"),
        ({"DISPLAY": ":0"}, "None"),
    ],
    ids=["headless-default", "user-choice-kept", "display"],
)
def test_mujoco_gl_defaults_to_egl_without_display(set_env, expected):
    environ = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MUJOCO_GL")}
    environ.update(set_env)
    code = "import os, gameon.envs; print(os.environ.get('MUJOCO_GL'))"
    result = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_mujoco_gl_is_left_alone_on_macos():
    """MuJoCo accepts MUJOCO_GL=egl only on Linux: elsewhere `import mujoco` raised on it."""
    environ = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MUJOCO_GL")}
    code = (
        "import sys; sys.platform = 'darwin'; import os, gameon.envs; "
        "print(os.environ.get('MUJOCO_GL'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "None"


def test_pixels_after_mujoco_was_imported_first_without_a_display_say_how_to_fix_it():
    """MuJoCo picks GLFW if imported before gameon.envs sets MUJOCO_GL=egl; the first frame
    then failed with "an OpenGL platform library has not been loaded"."""
    environ = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MUJOCO_GL")}
    code = (
        "import mujoco, gymnasium as gym, gameon.envs\n"
        "env = gym.make('GameOn/Reach-v0', obs_mode='pixels')\n"
        "try:\n    env.reset(seed=0)\nexcept RuntimeError as error:\n    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "set MUJOCO_GL=egl in the environment before Python starts" in result.stdout


@pytest.mark.parametrize("command", [["demo"], ["experiment", "--curriculum", "vlm"]])
def test_mujoco_gl_set_to_glfw_without_a_display_is_one_line_before_any_work(
    tmp_path, command: list[str]
) -> None:
    """MUJOCO_GL=glx was blamed on an import order in a traceback; the vlm experiment ran its
    whole iteration 0 before its first camera image failed."""
    environ = {k: v for k, v in os.environ.items() if k != "DISPLAY"} | {"MUJOCO_GL": "glx"}
    out = ["--out", str(tmp_path / "x.gif")] if command == ["demo"] else []
    run_dir = ["--run-dir", str(tmp_path / "run")] if command != ["demo"] else []
    result = subprocess.run(
        [sys.executable, "-m", "gameon", *command, *out, *run_dir],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "gameon: error: cannot render: MUJOCO_GL=glx makes MuJoCo render through GLFW, which "
        "needs a display, and none is set (DISPLAY); set MUJOCO_GL=egl for rendering without one\n"
    )
    assert result.stdout == "" and list(tmp_path.iterdir()) == []


# 10. Scene read-outs and start states


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_oracle_on_recorded_observations_matches_the_env(make_env, env_id):
    env = make_env(env_id)
    rng = np.random.default_rng(4)
    obs, info = env.reset(seed=2)
    start = scene_of(env, obs)
    instruction = parse(info["instruction"])
    assert_same_scene(start, env.unwrapped.scene())
    assert_same_scene(start, env.unwrapped.start_scene)
    for _ in range(15):
        obs, _, terminated, truncated, info = env.step(rng.uniform(-1, 1, 5))
        scene = scene_of(env, obs)
        assert_same_scene(scene, env.unwrapped.scene())
        assert oracle.success(instruction, scene, start) == info["success"]
        if terminated or truncated:
            break


def _start_layout(env, obs, info):
    """(scene, instruction, stacked top block or None) at reset."""
    instruction = parse(info["instruction"])
    top = instruction.objects[0] if instruction.skill == "unstack" else None
    return scene_of(env, obs), instruction, top


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_blocks_start_at_rest_spread_out_and_settle_on_the_table(make_env, env_id):
    env = make_env(env_id)
    for seed in range(8):
        obs, info = env.reset(seed=seed)
        scene, instruction, top = _start_layout(env, obs, info)
        assert not info["success"]
        for colour in scene.colours:
            i = scene.index(colour)
            assert oracle.at_rest(scene, colour) and oracle.upright(scene, colour)
            assert inside(scene.block_pos[i, :2], BLOCK_AREA_LOW, BLOCK_AREA_HIGH)
            layer = 1 if colour == top else 0
            assert scene.block_pos[i, 2] == pytest.approx(BLOCK_SIZE * (layer + 0.5), abs=3e-4)
            assert oracle.on_table(scene, colour) or colour == top
        for a, b in itertools.combinations(scene.colours, 2):
            if top in (a, b) and set(instruction.objects) == {a, b}:
                continue
            gap = np.linalg.norm(
                scene.block_pos[scene.index(a), :2] - scene.block_pos[scene.index(b), :2]
            )
            assert gap >= MIN_SPACING, (seed, a, b)
        if top is not None:
            assert oracle.on(scene, top, instruction.objects[1]), seed
        # One control step later everything still rests where it was.
        obs, *_ = env.step(NOOP)
        scene = scene_of(env, obs)
        for colour in scene.colours:
            assert oracle.at_rest(scene, colour), (seed, colour)
            if colour != top:
                assert oracle.on_table(scene, colour), (seed, colour)
        if top is not None:
            assert oracle.on(scene, top, instruction.objects[1]), seed


@pytest.mark.parametrize("env_id", ["GameOn/Stack-v0", "GameOn/Tower-v0"])
def test_the_steps_live_scene_is_the_scene_of_its_observation(make_env, env_id):
    """env.step judges a scene of views into the world's buffers: it must hold what a recorded
    observation rebuilds, contacts included, through grasps, stacking and release."""
    env = make_env(env_id)
    obs, _ = env.reset(seed=3)
    expert = make_expert(env, noise=0.1, seed=3)
    expert.reset()
    touched = np.zeros(4, bool)
    for _ in range(env.spec.max_episode_steps):
        obs, _, terminated, truncated, _ = env.step(expert.act(obs))
        live = env.unwrapped.world.live_scene()
        assert_same_scene(live, scene_of(env, obs))
        touched |= [
            live.touches_left_finger.any(),
            live.touches_right_finger.any(),
            live.touches_robot.any(),
            live.block_contacts.any(),
        ]
        if terminated or truncated:
            break
    assert terminated and touched.all()


def test_reset_observation_reports_resting_contacts(make_env):
    for env_id in ("GameOn/Stack-v0", "GameOn/Unstack-v0"):
        env = make_env(env_id)
        for seed in range(10):
            obs, info = env.reset(seed=seed)
            scene, instruction, top = _start_layout(env, obs, info)
            for colour in scene.colours:
                if colour != top:
                    assert oracle.on_table(scene, colour), (env_id, seed, colour)
            if top is not None:
                assert oracle.on(scene, top, instruction.objects[1]), (env_id, seed)


def test_unstack_top_block_starts_on_its_base(make_env):
    env = make_env(MULTI)
    for seed, (top, base) in enumerate(itertools.permutations(("red", "green", "blue"), 2)):
        text = f"unstack the {top} block from the {base} block"
        obs, info = env.reset(seed=seed, options={"instruction": text})
        scene = scene_of(env, obs)
        assert not info["success"]
        i, j = scene.index(top), scene.index(base)
        assert np.allclose(scene.block_pos[i, :2], scene.block_pos[j, :2])
        assert scene.block_pos[i, 2] - scene.block_pos[j, 2] == pytest.approx(BLOCK_SIZE, abs=3e-4)
        obs, *_ = env.step(NOOP)
        assert oracle.on(scene_of(env, obs), top, base)


# 11. Layout feasibility


def _push_starts(make_env, seeds=range(50)):
    env = make_env("GameOn/Push-v0")
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        scene = scene_of(env, obs)
        instruction = parse(info["instruction"])
        (block,) = instruction.objects
        yield scene, block, np.array(DIRECTION_VECTORS[instruction.relation])


def test_push_block_has_a_free_in_area_lane_and_room_behind(make_env):
    for scene, block, direction in _push_starts(make_env):
        xy = scene.block_pos[scene.index(block), :2]
        # Where the block ends up after a successful push stays inside the block area.
        pushed_to = xy + oracle.PUSH_DISTANCE * direction
        assert inside(pushed_to, BLOCK_AREA_LOW, BLOCK_AREA_HIGH), (block, pushed_to)
        # Nothing stands in the lane.
        for t in np.linspace(0.04, PUSH_LANE, 5):
            for other in scene.colours:
                if other != block:
                    gap = np.linalg.norm(
                        scene.block_pos[scene.index(other), :2] - (xy + t * direction)
                    )
                    assert gap >= MIN_SPACING, (block, other, t)
        # The hand can get behind the block.
        behind = xy - (BLOCK_SIZE + 0.03) * direction
        assert inside(behind, WORKSPACE_LOW[:2], WORKSPACE_HIGH[:2]), (block, behind)


def test_push_lane_ends_near_the_block_area_and_inside_the_workspace(make_env):
    for scene, block, direction in _push_starts(make_env):
        lane_end = scene.block_pos[scene.index(block), :2] + PUSH_LANE * direction
        assert inside(lane_end, BLOCK_AREA_LOW - 0.03, BLOCK_AREA_HIGH + 0.03), (block, lane_end)
        assert inside(lane_end, WORKSPACE_LOW[:2], WORKSPACE_HIGH[:2]), (block, lane_end)


def test_place_spot_is_free_and_inside_the_block_area(make_env):
    env = make_env("GameOn/Place-v0")
    for seed in range(50):
        obs, info = env.reset(seed=seed)
        scene = scene_of(env, obs)
        instruction = parse(info["instruction"])
        _, reference = instruction.objects
        spot = scene.block_pos[scene.index(reference), :2] + PLACE_OFFSET * np.array(
            SIDE_VECTORS[instruction.relation]
        )
        assert inside(spot, BLOCK_AREA_LOW, BLOCK_AREA_HIGH), (seed, spot)
        for other in scene.colours:
            if other not in instruction.objects:
                gap = np.linalg.norm(scene.block_pos[scene.index(other), :2] - spot)
                assert gap >= MIN_SPACING, (seed, other)


def test_place_episodes_do_not_start_solved(make_env):
    env = make_env("GameOn/Place-v0")
    for seed in range(100):
        obs, info = env.reset(seed=seed)
        instruction = parse(info["instruction"])
        assert not info["success"], seed
        obs, reward, terminated, *_ = env.step(NOOP)
        block, reference = instruction.objects
        assert not oracle.next_to(scene_of(env, obs), block, reference, instruction.relation), seed
        assert not terminated and reward == 0.0, seed


@pytest.mark.parametrize("env_id", [i for i in ENV_IDS if i not in ("GameOn/Place-v0", MULTI)])
def test_episodes_do_not_start_solved(make_env, env_id):
    env = make_env(env_id)
    for seed in range(50):
        _, info = env.reset(seed=seed)
        assert not info["success"], seed
        _, reward, terminated, *_ = env.step(NOOP)
        assert not terminated and reward == 0.0, seed


@pytest.mark.parametrize("blocks", [("purple", "yellow", "red", "green"), 5])
def test_blocks_option_sets_the_scene(make_env, blocks):
    colours = COLOURS[:blocks] if isinstance(blocks, int) else blocks
    env = make_env(MULTI, blocks=blocks)
    assert env.unwrapped.colours == colours
    obs, info = env.reset(seed=0, options={"instruction": "pick up the purple block"})
    assert obs["state"].shape == env.observation_space["state"].shape == (state_size(len(colours)),)
    assert scene_of(env, obs).colours == colours
    assert language.parse(info["instruction"]).objects == ("purple",)
    seen = {env.reset(seed=seed)[1]["instruction"] for seed in range(20)}
    assert set().union(*(parse(text).objects for text in seen)) == set(colours)


def test_evaluate_closes_its_env_when_the_policy_raises() -> None:
    closed = []

    class Watched(gym.Wrapper):
        def close(self) -> None:
            closed.append(True)
            super().close()

    def failing_policy(observation: dict) -> np.ndarray:
        raise KeyError("a policy bug")

    suite = [EvalTask("move the gripper above the red block", 0)]
    with pytest.raises(KeyError, match="a policy bug"):
        evaluate(failing_policy, "GameOn/Reach-v0", suite, wrapper=Watched)
    assert closed == [True]
