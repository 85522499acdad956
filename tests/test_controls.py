"""The controls: a privileged positive control that follows the target's prerequisite chain from
the learner's evaluations, and a negative control that practises only what the target does not
need."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from gameon.envs import ENV_IDS
from gameon.envs.language import SKILLS, parse
from gameon.experimenter.curricula import (
    CURRICULA,
    ONLINE_CURRICULA,
    check_curriculum_settings,
    curriculum_for_env,
    make_curriculum,
)
from gameon.experimenter.curriculum import (
    NO_VLM_USAGE,
    NegativeControl,
    Outcome,
    PositiveControl,
    curriculum_brief,
    curriculum_label,
    curriculum_scalars,
    target_chain,
    task_set,
    vlm_usage,
)

MULTI = task_set("GameOn/MultiSkill-v0")
TOWER = ("tower",)


def evaluation(rates: dict[str, float], episodes: int = 10) -> list[Outcome]:
    """A per-skill evaluation suite: `episodes` outcomes of each skill, `rate` of them successes."""
    outcomes = []
    for skill, rate in rates.items():
        tasks = task_set(skill)
        successes = round(rate * episodes)
        outcomes += [Outcome(tasks[i % len(tasks)], i < successes, 1.0) for i in range(episodes)]
    return outcomes


def practised_skills(curriculum, n: int = 200) -> set[str]:
    return {parse(task).skill for task in curriculum.propose_batch(n)}


def test_both_are_registered_and_labelled_by_their_names():
    assert CURRICULA[-2:] == ("positive_control", "negative_control")
    for name, cls in (("positive_control", PositiveControl), ("negative_control", NegativeControl)):
        curriculum = make_curriculum(name, MULTI, seed=0, target_skills=TOWER)
        assert isinstance(curriculum, cls) and curriculum.tasks == tuple(MULTI)
        assert curriculum.label == curriculum_label(curriculum) == name
        assert vlm_usage(curriculum) == NO_VLM_USAGE


def test_an_online_learners_curricula_leave_out_the_negative_control_and_errors_list_them():
    """Online learners practise on the env they are evaluated on, where the negative control has
    no task: their unknown-curriculum error lists only what they can train with."""
    assert ONLINE_CURRICULA == ("fixed", "hand", "lp", "vlm", "positive_control")
    for env_id in ENV_IDS:
        with pytest.raises(ValueError, match="no tasks left"):
            curriculum_for_env(env_id, "negative_control", 0)
    listed = "fixed, hand, lp, vlm, positive_control"
    with pytest.raises(ValueError, match=f"^unknown curriculum 'bogus'; accepted: {listed}$"):
        check_curriculum_settings("bogus", {}, accepted=ONLINE_CURRICULA)
    with pytest.raises(
        ValueError, match=f"^curriculum 'negative_control' cannot train here; accepted: {listed}$"
    ):
        check_curriculum_settings("negative_control", {}, accepted=ONLINE_CURRICULA)
    with pytest.raises(ValueError, match=f"accepted: {listed}, negative_control$"):
        check_curriculum_settings("bogus", {})  # the collect loop takes every curriculum
    with pytest.raises(ValueError, match=f"^unknown curriculum 'bogus'; accepted: {listed}, neg"):
        curriculum_for_env("GameOn/Reach-v0", "bogus", 0)


def test_prerequisite_chains():
    assert target_chain(TOWER) == ("lift", "stack", "tower")
    assert target_chain("stack") == ("lift", "stack")
    assert target_chain(["place"]) == ("lift", "place")
    assert target_chain(["unstack"]) == ("lift", "unstack")
    for skill in ("reach", "lift", "push"):
        assert target_chain([skill]) == (skill,)
    assert target_chain(["tower", "place"]) == ("lift", "place", "stack", "tower")


def test_positive_control_climbs_the_chain_as_evaluations_pass():
    positive = make_curriculum("positive_control", MULTI, seed=0, target_skills=TOWER)
    assert positive.skill == "lift" and practised_skills(positive) == {"lift"}
    assert Counter(positive.propose_batch(300)).keys() == set(task_set("lift")), "uniform"

    positive.update_batch([Outcome(task, True, 1.0) for task in task_set("lift") * 5])
    assert positive.skill == "lift", "its own attempts are not evaluations"
    positive.update_evaluation(evaluation({"reach": 1.0, "lift": 0.0, "stack": 0.0, "tower": 0.0}))
    assert positive.skill == "lift", "equally weak: the earlier prerequisite"
    positive.update_evaluation(evaluation({"lift": 0.5, "stack": 0.0}))
    assert positive.skill == "stack", "the weakest prerequisite, not the first unmastered"
    positive.update_evaluation(evaluation({"lift": 0.9, "stack": 0.1, "tower": 0.0}))
    assert positive.skill == "tower" and practised_skills(positive) == {"tower"}
    positive.update_evaluation(evaluation({"lift": 0.7, "stack": 0.1, "tower": 0.3}))
    assert positive.skill == "stack" and practised_skills(positive) == {"stack"}
    positive.update_evaluation(evaluation({"lift": 0.8, "stack": 0.8, "tower": 0.2}))
    assert positive.skill == "tower" and practised_skills(positive) == {"tower"}
    assert curriculum_brief(positive) == {
        "skill": "tower",
        "chain": ["lift", "stack", "tower"],
        "rates": {"reach": 1.0, "lift": 0.8, "stack": 0.8, "tower": 0.2},
    }
    assert curriculum_scalars(positive) == {"curriculum/chain_step": 2.0}

    positive.update_evaluation(evaluation({"lift": 0.1}))
    assert positive.skill == "lift", "a forgotten prerequisite comes first again"
    positive.update_evaluation(evaluation({"lift": 1.0, "stack": 0.9, "tower": 0.8}))
    assert positive.skill == "tower", "all mastered: the lowest rate"
    positive.update_evaluation(evaluation({"lift": 0.8}))
    assert positive.skill == "lift"


def test_positive_control_mastery_and_short_chains():
    place = make_curriculum("positive_control", MULTI, seed=0, target_skills=["place"], mastery=0.5)
    assert place.chain == ("lift", "place") and place.skill == "lift"
    place.update_evaluation(evaluation({"lift": 0.5}))
    assert place.skill == "place"
    reach = make_curriculum(
        "positive_control", task_set("GameOn/Reach-v0"), target_skills=["reach"]
    )
    assert practised_skills(reach) == {"reach"}
    with pytest.raises(ValueError, match=r"mastery must be in \[0, 1\]"):
        make_curriculum("positive_control", MULTI, target_skills=TOWER, mastery=1.5)


def test_negative_control_never_practises_what_the_target_needs():
    negative = make_curriculum("negative_control", MULTI, seed=0, target_skills=TOWER)
    assert negative.skills == ("reach", "push")
    proposed = Counter(parse(task).skill for task in negative.propose_batch(1000))
    assert set(proposed) == {"reach", "push"}
    assert not {"tower", "stack", "lift"} & set(proposed)
    negative.update_evaluation(evaluation({"tower": 1.0, "lift": 0.0}))
    negative.update_batch(evaluation({"reach": 1.0}))
    assert set(practised_skills(negative, 500)) == {"reach", "push"}, "it hears nothing"
    assert curriculum_brief(negative) == {"skills": ["reach", "push"], "tasks": 3 + 12}
    assert curriculum_scalars(negative) == {}

    for target, left in ((["push"], {"reach"}), (["reach"], {"push"}), (["lift"], None)):
        curriculum = make_curriculum("negative_control", MULTI, seed=0, target_skills=target)
        assert practised_skills(curriculum) == (left or {"reach", "push"})


def test_negative_control_without_tasks_left_raises():
    with pytest.raises(ValueError, match="negative_control has no tasks left"):
        make_curriculum("negative_control", MULTI, target_skills=SKILLS)
    with pytest.raises(ValueError, match="no tasks left"):
        make_curriculum("negative_control", task_set("GameOn/Tower-v0"), target_skills=TOWER)


@pytest.mark.parametrize("name", ["positive_control", "negative_control"])
def test_state_round_trips_and_reproduces_proposals(name):
    original = make_curriculum(name, MULTI, seed=4, target_skills=TOWER)
    original.propose_batch(7)
    original.update_evaluation(evaluation({"lift": 0.9, "stack": 0.3, "tower": 0.5}))
    state = json.loads(json.dumps(original.state_dict()))
    assert state["name"] == name and "rng" in state
    restored = make_curriculum(name, MULTI, seed=123, target_skills=TOWER)
    restored.load_state_dict(state)
    assert restored.state_dict() == original.state_dict()
    assert restored.propose_batch(60) == original.propose_batch(60)
    if name == "positive_control":
        assert restored.skill == "stack"
        strict = make_curriculum(name, MULTI, seed=0, target_skills=TOWER, mastery=0.95)
        with pytest.raises(ValueError, match="saved with mastery 0.8, this .* is 0.95"):
            strict.load_state_dict(state)
    other = make_curriculum(name, MULTI, seed=0, target_skills=["stack"])
    with pytest.raises(ValueError, match="target skills"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="'lp'"):
        restored.load_state_dict(make_curriculum("lp", MULTI).state_dict())


@pytest.mark.parametrize("name", ["positive_control", "negative_control"])
def test_bad_target_skills_raise_naming_the_accepted_ones(name):
    accepted = "accepted skills: reach, lift, push, place, stack, unstack, tower"
    with pytest.raises(ValueError, match=f"unknown target skill 'fly'; {accepted}"):
        make_curriculum(name, MULTI, target_skills=["tower", "fly"])
    with pytest.raises(ValueError, match=f"target_skills is empty; {accepted}"):
        make_curriculum(name, MULTI, target_skills=[])
    with pytest.raises(ValueError, match=f"the {name} curriculum needs target_skills"):
        make_curriculum(name, MULTI)
    with pytest.raises(ValueError, match=f"the {name} curriculum needs tasks"):
        make_curriculum(name, target_skills=TOWER)


def test_curriculum_for_env_aims_at_the_env_targets_unless_told():
    positive = curriculum_for_env(
        "GameOn/MultiSkill-v0", "positive_control", 0, target_skills=TOWER
    )
    assert positive.chain == ("lift", "stack", "tower") and positive.tasks == tuple(MULTI)
    own = curriculum_for_env("GameOn/MultiSkill-v0", "positive_control", 0)
    assert own.target_skills == SKILLS and own.skill == "reach"
    negative = curriculum_for_env(
        "GameOn/MultiSkill-v0", "negative_control", 0, target_skills=TOWER
    )
    assert practised_skills(negative) == {"reach", "push"}
    with pytest.raises(ValueError, match="cannot train on GameOn/Tower-v0.*needs tasks of lift"):
        curriculum_for_env("GameOn/Tower-v0", "positive_control", 0)
    with pytest.raises(ValueError, match="cannot train on GameOn/MultiSkill-v0.*no tasks left"):
        curriculum_for_env("GameOn/MultiSkill-v0", "negative_control", 0)


def test_a_collect_run_refuses_an_eval_env_that_leaves_out_skills_of_the_chain():
    """The positive control practises by evaluated success: an unevaluated skill stays lowest."""
    from gameon.experimenter.loop import LoopConfig

    config = LoopConfig(curriculum="positive_control", eval_env_id="GameOn/Tower-v0")
    with pytest.raises(
        ValueError,
        match="lift -> stack -> tower, but eval env GameOn/Tower-v0 does not evaluate lift, "
        "stack; use an eval env that evaluates every skill of the chain",
    ):
        config.validate()
    LoopConfig(curriculum="positive_control", eval_env_id="GameOn/MultiSkill-v0").validate()
    LoopConfig(curriculum="fixed", eval_env_id="GameOn/Tower-v0").validate()
