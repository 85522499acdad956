"""Curricula (fixed, hand, learning progress), their saved state, and the curriculum wrappers."""

import json
import re
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from gameon.envs.language import parse
from gameon.experimenter.curricula import curriculum_for_env, make_curriculum
from gameon.experimenter.curriculum import (
    HAND_CURRICULUM_TOML,
    NO_VLM_USAGE,
    Curriculum,
    CurriculumChanged,
    FixedCurriculum,
    HandCurriculum,
    LearningProgressCurriculum,
    Outcome,
    Stage,
    curriculum_brief,
    curriculum_label,
    curriculum_scalars,
    episode_budget,
    skill_probabilities,
    task_set,
    vlm_usage,
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


def test_hand_advances_at_a_rate_equal_to_its_threshold():
    # 14 of 25 is 0.56, yet 0.56 * 25 is 14.000000000000002 in floats: comparing the count with
    # threshold * window kept the stage until a 15th success.
    stage = Stage("reach", tuple(REACH), window=25, threshold=0.56)
    hand = HandCurriculum([stage, STAGES[1]], seed=0)
    fed = [(REACH[0], True)] * 14 + [(REACH[0], False)] * 11
    assert stages_after(hand, fed)[-2:] == [0, 1]


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
    hand = HandCurriculum.from_toml(HAND_CURRICULUM_TOML, colours=3, budget=60)
    assert [stage.name for stage in hand.stages] == ["reach", "lift", "place", "stack", "tower"]
    assert hand.review == 0.1
    assert hand.stages[-1].tasks == tuple(task_set("tower", 3))
    multi = task_set("GameOn/MultiSkill-v0")
    assert make_curriculum("hand", multi, seed=0, budget=60).stage_name == "reach"
    with pytest.raises(ValueError, match="outside the given tasks"):
        make_curriculum("hand", REACH, budget=60)


def test_shipped_toml_windows_scale_with_the_budget():
    windows = [s.window for s in HandCurriculum.from_toml(budget=60).stages]
    assert windows == [5, 5, 6, 6, 9]
    assert [s.window for s in HandCurriculum.from_toml(budget=1000).stages] == [
        80,
        80,
        100,
        100,
        150,
    ]
    assert {s.window for s in HandCurriculum.from_toml(budget=5).stages} == {3}, "min_window"
    with pytest.raises(ValueError, match="budget"):
        HandCurriculum.from_toml()
    with pytest.raises(ValueError, match="budget"):
        make_curriculum("hand", task_set("GameOn/MultiSkill-v0"))


def test_shipped_hand_leaves_reach_within_a_budget_of_60():
    budget = 60
    hand = make_curriculum("hand", task_set("GameOn/MultiSkill-v0"), seed=0, budget=budget)
    spent = 0
    while hand.stage_name == "reach" and spent < budget:  # iterations of 12 tasks
        tasks = hand.propose_batch(12)
        hand.update_batch([Outcome(task, parse(task).skill == "reach", 1.0) for task in tasks])
        spent += len(tasks)
    assert hand.stage_name == "lift" and spent == 12, "the first iteration fills reach's window"


def test_window_share_with_own_min_window_and_checks(tmp_path):
    path = tmp_path / "share.toml"
    stage = '[[stage]]\nname = "a"\nskills = ["reach"]\n{}\nthreshold = 0.5\n'
    path.write_text("min_window = 2\n" + stage.format("window_share = 0.5"))
    assert HandCurriculum.from_toml(path, budget=3).stages[0].window == 2
    assert HandCurriculum.from_toml(path, budget=10).stages[0].window == 5
    path.write_text(stage.format("window_share = 0.5\nwindow = 4"))
    with pytest.raises(ValueError, match="not both"):
        HandCurriculum.from_toml(path, budget=10)
    path.write_text(stage.format("window_share = 1.5"))
    with pytest.raises(ValueError, match=r"window_share must be a number in \(0, 1\]"):
        HandCurriculum.from_toml(path, budget=10)
    path.write_text(stage.format("window = 4"))
    assert HandCurriculum.from_toml(path).stages[0].window == 4, "windows need no budget"
    with pytest.raises(ValueError, match="budget must be >= 1"):
        HandCurriculum.from_toml(path, budget=0)


def test_hand_state_of_another_budget_keeps_its_stage_windows():
    """A run resumed with more iterations (a larger budget) goes on with its saved windows."""
    tasks = task_set("GameOn/MultiSkill-v0")
    saved = make_curriculum("hand", tasks, seed=0, budget=60)
    saved.update_batch([Outcome(task, True, 1.0) for task in saved.propose_batch(6)])
    state = json.loads(json.dumps(saved.state_dict()))
    longer = make_curriculum("hand", tasks, seed=0, budget=1000)
    longer.load_state_dict(state)
    assert [stage.window for stage in longer.stages] == [5, 5, 6, 6, 9]
    assert longer.state_dict() == saved.state_dict()
    assert longer.propose_batch(50) == saved.propose_batch(50)
    with pytest.raises(ValueError, match="2 stage windows .* has 5 stages"):
        longer.load_state_dict({**state, "windows": [5, 5]})


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
        (
            '[[stage]]\nname = "a"\nskills = "reach"\nwindow = 5\nthreshold = 0.5\n',
            r"stage 0 \('a'\): skills must be a list of strings, e\.g\. skills = \[\"reach\"\]",
        ),
        (
            '[[stage]]\nname = "a"\ninstructions = "lift red"\nwindow = 5\nthreshold = 0.5\n',
            "instructions must be a list of strings",
        ),
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


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("fixed", {}),
        ("hand", {"budget": 60}),
        ("lp", {}),
        ("lp", {"group": "skill"}),
        ("positive_control", {"target_skills": ("tower",)}),
        ("negative_control", {"target_skills": ("tower",)}),
    ],
)
def test_state_round_trip_reproduces_future_proposals(name, options):
    tasks = task_set("GameOn/MultiSkill-v0")
    original = make_curriculum(name, tasks, seed=3, **options)
    for instruction in original.propose_batch(40):
        original.update(instruction, len(instruction) % 3 != 0, 0.5)
    original.update_evaluation(
        [Outcome(task, i % 2 == 0, 1.0) for i, task in enumerate(tasks[::3])]
    )
    state = json.loads(json.dumps(original.state_dict()))
    restored = make_curriculum(name, tasks, seed=99, **options)
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


def test_hand_state_saved_with_other_stages_is_refused():
    """A stages file edited between a run's start and its resume went on unnoticed (the stage
    count and tasks were all that was checked)."""
    saved = json.loads(json.dumps(HandCurriculum(STAGES, seed=0).state_dict()))
    easier = [STAGES[0], Stage("lift", tuple(LIFT), window=2, threshold=0.5)]
    for other in (HandCurriculum(easier, seed=0), HandCurriculum(STAGES, seed=0, review=0.3)):
        with pytest.raises(CurriculumChanged, match="stages .* differ from those the run was"):
            other.load_state_dict(saved)
    del saved["stages"]  # a state saved before the stages were kept
    HandCurriculum(easier, seed=0).load_state_dict(saved)


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


def skill_outcomes(skill: str, successes: int, episodes: int = 10) -> list[Outcome]:
    """`episodes` outcomes of a skill's tasks in turn, the first `successes` of them successes."""
    tasks = task_set(skill)
    return [Outcome(tasks[i % len(tasks)], i < successes, 1.0) for i in range(episodes)]


def test_lp_per_skill_favours_the_skill_whose_success_rises():
    tasks = task_set("GameOn/MultiSkill-v0")
    lp = make_curriculum("lp", tasks, seed=0, group="skill")
    assert lp.groups == ("reach", "lift", "push", "place", "stack", "unstack", "tower")
    assert sum(skill_probabilities(lp).values()) == pytest.approx(1.0)
    assert skill_probabilities(lp) == pytest.approx(dict.fromkeys(lp.groups, 1 / 7))
    flat = {"reach": 10, "lift": 10, "push": 0, "place": 0, "unstack": 0, "tower": 0}
    for rising in (0, 6, 9):
        lp.update_evaluation(skill_outcomes("stack", rising))
        for skill, successes in flat.items():
            lp.update_evaluation(skill_outcomes(skill, successes))
    progress = lp.skill_progress()
    assert progress["stack"] > 0.3
    assert all(progress[skill] == 0.0 for skill in flat)
    skills = skill_probabilities(lp)
    assert max(skills, key=skills.get) == "stack" and skills["stack"] > 0.8
    probabilities = lp.probabilities()
    assert len(probabilities) == len(tasks) and probabilities.sum() == pytest.approx(1.0)
    stack = [p for t, p in zip(tasks, probabilities, strict=True) if parse(t).skill == "stack"]
    assert stack == pytest.approx([skills["stack"] / 6] * 6), "tasks of a skill share it"
    counts = Counter(parse(task).skill for task in lp.propose_batch(500))
    assert counts.most_common(1)[0][0] == "stack"
    assert lp.brief()["skill_progress"] == progress
    assert lp.scalars()["curriculum/p_stack"] == skills["stack"]


def test_lp_per_task_is_the_default_and_moves_less_in_a_short_run():
    tasks = task_set("GameOn/MultiSkill-v0")
    per_task = make_curriculum("lp", tasks, seed=0)
    per_skill = make_curriculum("lp", tasks, seed=0, group="skill")
    assert per_task.group == "task" and per_task.groups == tuple(tasks)
    for rising in (0, 6, 9):
        for curriculum in (per_task, per_skill):
            curriculum.update_evaluation(skill_outcomes("stack", rising))
    # 30 outcomes spread over 6 tasks move each task's EMAs a third as far as the skill's
    assert per_skill.skill_progress()["stack"] > 2 * per_task.skill_progress()["stack"]
    with pytest.raises(ValueError, match="accepted: task, skill"):
        make_curriculum("lp", tasks, group="colour")
    with pytest.raises(ValueError, match="per task, this lp curriculum per skill"):
        per_skill.load_state_dict(per_task.state_dict())


def test_vlm_evaluations_feed_its_background_lp_per_skill():
    tasks = task_set("GameOn/MultiSkill-v0")
    vlm = make_curriculum("vlm", tasks, seed=0, group="skill", interval=None)
    assert vlm.lp.group == "skill" and make_curriculum("vlm", tasks).lp.group == "task"
    for rising in (0, 6, 9):
        vlm.update_evaluation(skill_outcomes("stack", rising))
    assert vlm.lp.skill_progress()["stack"] > 0.3
    assert not any(vlm.outcomes.values()), "its practice history stays the attempts'"
    restored = make_curriculum("vlm", tasks, seed=5, group="skill", interval=None)
    restored.load_state_dict(json.loads(json.dumps(vlm.state_dict())))
    assert restored.lp.state_dict() == vlm.lp.state_dict()
    assert curriculum_label(vlm) == "vlm[rules]"
    assert set(curriculum_brief(vlm)) == {
        "label",
        "proposal",
        "source",
        "consults",
        "skill_probabilities",
    }
    assert curriculum_scalars(vlm) == {"vlm/calls": 0.0, "vlm/fallbacks": 0.0}


def test_curriculum_for_env_passes_group_to_lp_only():
    lp = curriculum_for_env("GameOn/MultiSkill-v0", "lp", 0, group="skill")
    assert lp.group == "skill" and len(lp.groups) == 7
    assert curriculum_for_env("GameOn/MultiSkill-v0", "fixed", 0, group="skill").name == "fixed"


def test_update_evaluation_defaults_to_update_batch():
    outcomes = [Outcome(REACH[0], False, 0.0), Outcome(REACH[0], True, 1.0)]
    evaluated, practised = LearningProgressCurriculum(REACH), LearningProgressCurriculum(REACH)
    evaluated.update_evaluation(outcomes)
    practised.update_batch(outcomes)
    assert evaluated.state_dict() == practised.state_dict()
    assert evaluated.fast[0] == pytest.approx(0.1)


def test_helpers_keep_their_outputs_for_the_existing_curricula():
    tasks = task_set("GameOn/MultiSkill-v0")
    fixed, lp = make_curriculum("fixed", tasks), make_curriculum("lp", REACH)
    hand = make_curriculum("hand", tasks, budget=60)
    assert [curriculum_label(c) for c in (fixed, hand, lp)] == ["fixed", "hand", "lp"]
    assert curriculum_brief(fixed) == {"tasks": len(tasks)}
    assert curriculum_brief(hand) == {"stage": "reach", "stage_index": 0, "mastered": False}
    assert curriculum_brief(lp) == {"skill_probabilities": pytest.approx({"reach": 1.0})}
    assert curriculum_scalars(fixed) == {}
    assert curriculum_scalars(hand) == {"curriculum/stage": 0.0}
    assert curriculum_scalars(lp) == pytest.approx({"curriculum/p_reach": 1.0})
    assert all(vlm_usage(c) == NO_VLM_USAGE for c in (fixed, hand, lp))


def test_episode_budget_is_a_lower_bound_on_finished_episodes():
    assert episode_budget("GameOn/Reach-v0", 256, 2, 20) == 12
    assert episode_budget("GameOn/MultiSkill-v0", 300_000, 2) == 750, "the env's 400 steps"
    assert episode_budget("GameOn/Tower-v0", 10, 4) == 1
    with pytest.raises(ValueError, match="GameOn/Reach-v0"):
        episode_budget("GameOn/Nope-v0", 100)


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


def test_hand_state_saved_with_another_window_is_refused_but_not_a_share_of_a_new_budget():
    """An edited `window` went unnoticed on resume (the saved windows were restored over it) while
    the record named the edited file; a window_share's window may differ with a larger budget."""
    saved = json.loads(json.dumps(HandCurriculum(STAGES, seed=0).state_dict()))
    wider = [STAGES[0], replace(STAGES[1], window=50, window_rule="")]
    with pytest.raises(CurriculumChanged, match="windows, thresholds or review rate"):
        HandCurriculum(wider, seed=0).load_state_dict(saved)

    config = {
        "stage": [{"name": "reach", "skills": ["reach"], "window_share": 0.5, "threshold": 0.5}]
    }
    short = HandCurriculum.from_config(config, budget=10)
    longer = HandCurriculum.from_config(config, budget=40)
    assert (short.stages[0].window, longer.stages[0].window) == (5, 20)
    longer.load_state_dict(json.loads(json.dumps(short.state_dict())))
    assert longer.stages[0].window == 5
    saved_before_rules = json.loads(json.dumps(short.state_dict()))
    saved_before_rules["stages"] = [entry[:3] for entry in saved_before_rules["stages"][:-1]] + [
        saved_before_rules["stages"][-1]
    ]
    longer.load_state_dict(saved_before_rules)


def test_lp_state_saved_with_other_rates_is_refused():
    """The state kept the EMAs but not the rates that move them: a state of fast=0.5, slow=0.05,
    explore=0 resumed under the defaults and proposed otherwise than the saved run would have."""
    own = LearningProgressCurriculum(REACH, fast=0.5, slow=0.05, explore=0.0)
    saved = json.loads(json.dumps(own.state_dict()))
    with pytest.raises(CurriculumChanged, match="fast, slow and explore rates"):
        LearningProgressCurriculum(REACH).load_state_dict(saved)
    LearningProgressCurriculum(REACH, fast=0.5, slow=0.05, explore=0.0).load_state_dict(saved)
    del saved["rates"]  # a state saved before the rates were kept
    LearningProgressCurriculum(REACH).load_state_dict(saved)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[[stage]]\nname = 'étape'\n".encode("latin-1"), "not UTF-8 text"),
        (None, "cannot be read"),
        (
            b'[[stage]]\nname = 5\nskills = ["reach"]\nwindow = 3\nthreshold = 0.5\n',
            "stage 0: name must be a non-empty string, got 5",
        ),
        (
            b'[[stage]]\nname = "a"\nskills = ["reach"]\nwindow = 3\nthreshold = 0.5\n' * 2,
            "stage names must differ; 'a' repeats",
        ),
    ],
)
def test_a_stages_file_that_cannot_be_used_is_a_value_error_naming_it(tmp_path, content, message):
    """A Latin-1 file was a bare UnicodeDecodeError naming no file, a missing one a bare
    FileNotFoundError; `name = 5` became the stage "5" and a repeated name was accepted."""
    path = tmp_path / "stages.toml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: .*{re.escape(message)}"):
        HandCurriculum.from_toml(path)


def test_a_stages_file_saved_with_a_byte_order_mark_reads():
    """Some editors save UTF-8 with a BOM, which tomllib calls an invalid statement."""
    text = HAND_CURRICULUM_TOML.read_bytes()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bom.toml"
        path.write_bytes(b"\xef\xbb\xbf" + text)
        bom = HandCurriculum.from_toml(path, budget=100)
    assert [s.name for s in bom.stages] == [
        s.name for s in HandCurriculum.from_toml(budget=100).stages
    ]


def test_hand_warns_of_a_stage_window_that_cannot_fill_within_the_outcomes_left(tmp_path):
    """A stage whose window (with those before it) outgrows the outcomes a run reports is never
    left; the last stage never ends anyway, so its window is not held against the budget."""
    hand = HandCurriculum(STAGES, seed=0)
    assert hand.budget_warning(4) is None
    assert hand.budget_warning(3).startswith(
        "hand curriculum stage 'reach' (window 4) can never end, so stage 'lift' is never "
        "practised: its window needs 4 more outcomes of its tasks, more than the 3 the run has "
        "left to report to the curriculum; give smaller windows (window"
    )
    assert HandCurriculum([STAGES[0], replace(STAGES[1], window=500)]).budget_warning(4) is None
    three = HandCurriculum([*STAGES, Stage("tower", ("build a tower",), 9, 0.5)], seed=0)
    assert (
        "stage 'lift' (window 2) can never end, so stage 'tower' is never practised: its window "
        "and those of the stages before it need 6 more outcomes of their tasks, more than the 5"
    ) in three.budget_warning(5)
    assert three.budget_warning(6) is None
    for _ in range(3):
        hand.update(REACH[0], True, 1.0)
    assert hand.budget_warning(1) is None, "3 of the reach window's 4 outcomes are in"
    path = tmp_path / "stages.toml"
    stage = '[[stage]]\nname = "{}"\nskills = ["reach"]\nwindow = 9\nthreshold = 0.5\n'
    path.write_text(stage.format("a") + stage.format("b"))
    assert f"give smaller windows in {path} (" in HandCurriculum.from_toml(path).budget_warning(8)
    assert FixedCurriculum(REACH).budget_warning(0) is None
    assert LearningProgressCurriculum(REACH).budget_warning(0) is None


def test_hand_errors_say_counts_of_one_in_the_singular():
    saved = HandCurriculum(STAGES, seed=0).state_dict()
    with pytest.raises(ValueError, match=r"saved with 1 stage window \[4\], this hand curriculum"):
        HandCurriculum(STAGES, seed=0).load_state_dict({**saved, "windows": [4]})
    with pytest.raises(ValueError, match="budget must be >= 1 outcome, got 0"):
        HandCurriculum.from_toml(HAND_CURRICULUM_TOML, budget=0)
