"""Curricula (fixed, hand, learning progress), their saved state, and the curriculum wrappers."""

import json
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest

from gameon.envs.language import parse
from gameon.experimenter.curriculum import (
    HAND_CURRICULUM_TOML,
    Curriculum,
    FixedCurriculum,
    HandCurriculum,
    LearningProgressCurriculum,
    Outcome,
    Stage,
    make_curriculum,
    task_set,
)
from gameon.experimenter.curriculum_wrapper import (
    CurriculumVectorWrapper,
    CurriculumWrapper,
    make_curriculum_vec_env,
)

REACH = task_set("GameOn/Reach-v0")
LIFT = task_set("lift")
STAGES = [
    Stage("reach", tuple(REACH), window=4, threshold=0.75),
    Stage("lift", tuple(LIFT), window=2, threshold=1.0),
]


class RecordingCurriculum(FixedCurriculum):
    """A fixed curriculum that logs every proposal and every reported outcome."""

    def __init__(self, tasks, seed=0):
        super().__init__(tasks, seed)
        self.proposed: list[str] = []
        self.updates: list[Outcome] = []

    def propose(self) -> str:
        instruction = super().propose()
        self.proposed.append(instruction)
        return instruction

    def update(self, instruction, success, episode_return):
        super().update(instruction, success, episode_return)
        self.updates.append(Outcome(instruction, success, episode_return))


def test_task_set_lists_canonical_instructions_of_an_env():
    assert REACH == [
        "move the gripper above the red block",
        "move the gripper above the green block",
        "move the gripper above the blue block",
    ]
    stack = task_set("GameOn/Stack-v0", colours=3)
    assert len(stack) == 6 and all(str(parse(text)) == text for text in stack)
    assert len(task_set(["push", "place"], ("red", "blue"))) == 2 * 4 + 2 * 4
    with pytest.raises(ValueError, match="GameOn/Reach-v0"):
        task_set("GameOn/Nope-v0")


def test_fixed_is_uniform_over_its_tasks():
    tasks = task_set("GameOn/MultiSkill-v0")
    curriculum = FixedCurriculum(tasks, seed=1)
    n = 200 * len(tasks)
    counts = Counter(curriculum.propose_batch(n))
    assert set(counts) == set(tasks)
    observed = np.array([counts[task] for task in tasks])
    chi_square = ((observed - 200) ** 2 / 200).sum()
    assert chi_square < len(tasks) + 4 * np.sqrt(2 * len(tasks))


def test_fixed_with_target_tasks_proposes_only_those():
    targets = ["build a tower of red, green and blue", "stack red on blue"]
    curriculum = make_curriculum("fixed", targets, seed=0)
    assert set(curriculum.propose_batch(200)) == {
        "build a tower of red, green and blue from the bottom up",
        "stack the red block on the blue block",
    }


def stages_after(hand: HandCurriculum, outcomes: list[tuple[str, bool]]) -> list[int]:
    """Feed outcomes one by one and return the stage index after each."""
    stages = []
    for instruction, success in outcomes:
        hand.update(instruction, success, float(success))
        stages.append(hand.stage)
    return stages


def test_hand_advances_exactly_when_the_rule_holds():
    red, lift = REACH[0], LIFT[0]
    hand = HandCurriculum(STAGES, seed=0)
    fed = [(red, True), (red, True), (red, True), (lift, True), (red, False)]
    assert stages_after(hand, fed) == [0, 0, 0, 0, 1], "needs a full window; lift does not count"
    assert hand.stage_name == "lift" and hand.window == []

    hand = HandCurriculum(STAGES, seed=0)
    fed = [(red, False), (red, True), (red, True), (red, False), (red, True)]
    assert stages_after(hand, fed) == [0, 0, 0, 0, 1], "2 of 4 < 0.75; then 3 of the last 4"


def test_hand_last_stage_stays():
    hand = HandCurriculum(STAGES, seed=0)
    hand.stage = 1
    assert not hand.mastered
    assert stages_after(hand, [(LIFT[0], True), (LIFT[1], True), (LIFT[2], True)]) == [1, 1, 1]
    assert hand.mastered
    hand.update(LIFT[1], False, 0.0)
    assert hand.stage == 1 and not hand.mastered


def test_hand_samples_its_stage_and_reviews_earlier_ones():
    hand = HandCurriculum(STAGES, seed=0, review=0.1)
    assert set(hand.propose_batch(100)) == set(REACH)
    hand.stage = 1
    counts = Counter(hand.propose_batch(2000))
    review = sum(counts[task] for task in REACH) / 2000
    assert set(counts) == set(REACH) | set(LIFT)
    assert 0.07 < review < 0.13


def test_shipped_toml_loads_for_three_blocks():
    hand = HandCurriculum.from_toml(HAND_CURRICULUM_TOML, colours=3)
    assert [stage.name for stage in hand.stages] == ["reach", "lift", "place", "stack", "tower"]
    assert hand.review == 0.1
    assert hand.stages[-1].tasks == tuple(task_set("tower", 3))
    assert make_curriculum("hand", task_set("GameOn/MultiSkill-v0"), seed=0).stage_name == "reach"
    with pytest.raises(ValueError, match="outside the given tasks"):
        make_curriculum("hand", REACH)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[[stage]]\nname = "a"\nskills = ["reach"]\nwindow = 5\n', "missing key 'threshold'"),
        ('[[stage]]\nname = "a"\nskills = ["fly"]\nwindow = 5\nthreshold = 0.5\n', "'fly'"),
        ('[[stage]]\nname = "a"\nskills = ["reach"]\nwindow = 5\nthreshold = 1.5\n', r"\[0, 1\]"),
        ('[[stage]]\nname = "a"\nwindow = 5\nthreshold = 0.5\n', "'skills', 'instructions'"),
        ('[[stage]]\nname = "a"\nskills = ["reach"]\nwindow = 0\nthreshold = 0.5\n', "window"),
        (
            '[[stage]]\nname = "a"\ninstructions = ["fly away"]\nwindow = 5\nthreshold = 0.5\n',
            "cannot parse",
        ),
        ('[[stage]]\nname = "a"\nskills = ["reach"]\nwindw = 5\nthreshold = 0.5\n', "windw"),
        ("review = 0.1\n", "missing key 'stage'"),
        ("[[stage]\n", "not valid TOML"),
    ],
)
def test_malformed_toml_raises_naming_the_problem(tmp_path, text, problem):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem):
        HandCurriculum.from_toml(path)


def test_toml_instructions_are_canonicalised_and_checked_against_the_scene(tmp_path):
    path = tmp_path / "own.toml"
    stage = '[[stage]]\nname = "s"\ninstructions = ["{}"]\nwindow = 5\nthreshold = 0.5\n'
    path.write_text(stage.format("stack red on blue"))
    tasks = HandCurriculum.from_toml(path).stages[0].tasks
    assert tasks == ("stack the red block on the blue block",)
    path.write_text(stage.format("stack purple on blue"))
    with pytest.raises(ValueError, match="purple"):
        HandCurriculum.from_toml(path, colours=3)


def test_lp_is_uniform_without_data_and_favours_changing_success():
    rising, flat, idle = LIFT
    lp = LearningProgressCurriculum(LIFT, seed=0, explore=0.2)
    np.testing.assert_allclose(lp.probabilities(), np.full(3, 1 / 3))
    for step in range(60):
        lp.update(rising, step >= 10, 1.0)
        lp.update(flat, True, 1.0)
    probabilities = lp.probabilities()
    assert probabilities[0] > 0.8 and probabilities[1] == pytest.approx(0.2 / 3)
    assert probabilities[2] == pytest.approx(0.2 / 3)
    counts = Counter(lp.propose_batch(1000))
    assert counts[rising] > 3 * counts[flat]


@pytest.mark.parametrize("name", ["fixed", "hand", "lp"])
def test_state_round_trip_reproduces_future_proposals(name):
    tasks = task_set("GameOn/MultiSkill-v0")
    original = make_curriculum(name, tasks, seed=3)
    for instruction in original.propose_batch(40):
        original.update(instruction, len(instruction) % 3 != 0, 0.5)
    state = json.loads(json.dumps(original.state_dict()))
    restored = make_curriculum(name, tasks, seed=99)
    restored.load_state_dict(state)
    assert restored.propose_batch(50) == original.propose_batch(50)
    assert restored.state_dict() == original.state_dict()


def test_hand_round_trip_keeps_stage_and_window():
    hand = HandCurriculum(STAGES, seed=0)
    for success in (True, True, True, True, True):
        hand.update(REACH[1], success, 1.0)
    state = json.loads(json.dumps(hand.state_dict()))
    restored = HandCurriculum(STAGES, seed=5)
    restored.load_state_dict(state)
    assert (restored.stage, restored.window) == (1, [])
    assert restored.propose_batch(50) == hand.propose_batch(50)


def test_state_of_another_curriculum_is_refused():
    with pytest.raises(ValueError, match="'lp'"):
        FixedCurriculum(REACH).load_state_dict(LearningProgressCurriculum(REACH).state_dict())


def test_unknown_curriculum_and_unparsable_instruction_raise_clear_errors():
    with pytest.raises(ValueError, match="accepted: fixed, hand, lp, vlm"):
        make_curriculum("random", REACH)
    with pytest.raises(ValueError, match="the vlm curriculum needs tasks"):
        make_curriculum("vlm")
    curricula = (FixedCurriculum(REACH), HandCurriculum(STAGES), make_curriculum("lp", REACH))
    for curriculum in curricula:
        assert isinstance(curriculum, Curriculum)
        with pytest.raises(ValueError, match="cannot parse instruction 'fly to the moon'"):
            curriculum.update("fly to the moon", True, 1.0)


def test_updates_are_stored_in_canonical_form():
    lp = LearningProgressCurriculum(REACH, seed=0)
    lp.update("reach red", True, 1.0)
    assert lp.seen == [True, False, False]


def test_single_env_wrapper_proposes_and_reports_each_episode_once():
    curriculum = RecordingCurriculum(REACH, seed=0)
    env = CurriculumWrapper(gym.make("GameOn/Reach-v0", max_episode_steps=5), curriculum)
    _, info = env.reset(seed=0)
    assert info["instruction"] == curriculum.proposed[0]
    for _ in range(12):
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        if terminated or truncated:
            assert curriculum.updates[-1].instruction == info["instruction"]
            env.reset()
    assert len(curriculum.updates) == 2 and len(curriculum.proposed) == 3
    env.reset(options={"instruction": "reach the blue block"})
    for _ in range(5):
        env.step(env.action_space.sample())
    assert len(curriculum.updates) == 2, "explicit instructions are not the curriculum's"
    env.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_wrapper_reports_every_proposal_once_in_its_sub_env(mode):
    curriculum = RecordingCurriculum(REACH, seed=0)
    envs = make_curriculum_vec_env(
        "GameOn/Reach-v0",
        2,
        curriculum,
        vectorization_mode=mode,
        max_episode_steps=10,
        reward_mode="dense",
    )
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    envs.action_space.seed(0)
    _, info = envs.reset(seed=0)
    current = list(curriculum.proposed)
    assert list(info["instruction"]) == current
    returns = np.zeros(2)
    for _ in range(47):
        proposed, reported = len(curriculum.proposed), len(curriculum.updates)
        obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        returns += reward
        ended = np.flatnonzero(terminated | truncated)
        final = info.get("final_info", {})
        expected = [
            Outcome(current[i], bool(final["success"][i]), float(returns[i])) for i in ended
        ]
        assert curriculum.updates[reported:] == expected
        for i in ended:
            assert final["instruction"][i] == current[i]
            assert not np.array_equal(info["final_obs"][i]["state"], obs["state"][i])
            returns[i] = 0.0
        new = curriculum.proposed[proposed:]
        assert new == [info["instruction"][i] for i in ended]
        for i, instruction in zip(ended, new, strict=True):
            current[i] = instruction
        assert list(info["instruction"]) == current
    finished = Counter(outcome.instruction for outcome in curriculum.updates)
    assert Counter(curriculum.proposed) == finished + Counter(current), "the rest still run"
    assert len(curriculum.updates) >= 2 * 4, "10-step episodes, 47 steps, 2 envs"
    envs.close()


def test_vector_wrapper_needs_autoreset_disabled():
    envs = gym.make_vec("GameOn/Reach-v0", num_envs=1, vectorization_mode="sync")
    with pytest.raises(ValueError, match="AutoresetMode.DISABLED"):
        CurriculumVectorWrapper(envs, FixedCurriculum(REACH))
    envs.close()
