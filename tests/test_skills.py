"""The skill library: default skills, JSON round trips, run-time macros, decompose, executors."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from gameon.envs.language import SKILLS, Instruction, canonical_templates, parse
from gameon.experimenter.skills import (
    LearnedExecutor,
    MacroExecutor,
    ScriptedExecutor,
    Skill,
    SkillLibrary,
    default_library,
    executor_from_dict,
)

TOWER = "build a tower of red, green and blue from the bottom up"


def tiny_checkpoint(path: Path, env: gym.Env) -> Path:
    """An untrained two-layer actor saved in the baselines' checkpoint format."""
    torch = pytest.importorskip("torch")
    from gameon.policy import Actor, flat_size, save_checkpoint

    torch.manual_seed(0)
    actor = Actor(flat_size(env.observation_space), 5, hidden=(8,))
    return save_checkpoint(path, "bc", "GameOn/Lift-v0", actor, None, {})


def tower_macro() -> Skill:
    return Skill(
        "tower-of-three",
        "build a tower of {0}, {1} and {2} from the bottom up",
        "three blocks stacked bottom up, as two verified stacks",
        MacroExecutor(
            ("stack the {1} block on the {0} block", "stack the {2} block on the {1} block")
        ),
    )


def test_default_library_has_every_grammar_skill() -> None:
    library = default_library(noise=0.1)
    assert library.names() == list(SKILLS)
    templates = canonical_templates()
    for name in SKILLS:
        skill = library.get(name)
        assert skill.template == templates[name]
        assert len(skill.description) > 40
        assert skill.executor == ScriptedExecutor(0.1) and skill.steps == ()
        assert name in library
    lift = library.get("lift").description
    assert lift.startswith("pick up a block") and "8 cm" in lift
    text = library.describe()
    assert all(f"- {name} [scripted]" in text for name in SKILLS)


def test_json_round_trip_keeps_every_executor(tmp_path: Path) -> None:
    library = default_library()
    library.replace_executor("lift", LearnedExecutor(str(tmp_path / "lift.pt")))
    library.add(tower_macro())
    path = library.save(tmp_path / "sub" / "library.json")
    assert not path.with_name("library.json.tmp").exists()
    loaded = SkillLibrary.load(path)
    assert loaded.to_dict() == library.to_dict()
    assert loaded.names() == [*SKILLS, "tower-of-three"]
    assert loaded.get("lift").executor == LearnedExecutor(str(tmp_path / "lift.pt"))
    assert json.loads(path.read_text())["skills"][1]["executor"] == {
        "kind": "learned",
        "checkpoint": str(tmp_path / "lift.pt"),
    }


def test_load_refuses_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no skill library"):
        SkillLibrary.load(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        SkillLibrary.load(broken)
    broken.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a skill library"):
        SkillLibrary.load(broken)
    with pytest.raises(ValueError, match="accepted: scripted, learned, macro"):
        executor_from_dict({"kind": "magic"})


def test_add_a_macro_at_run_time() -> None:
    library = default_library()
    macro = tower_macro()
    library.add(macro)
    assert "tower-of-three" in library and macro.steps == macro.executor.steps
    assert "- tower-of-three [macro: stack the {1} block" in library.describe()
    steps = library.decompose("build a tower of blue, red and green")
    assert [str(s) for s in steps] == [
        "stack the red block on the blue block",
        "stack the green block on the red block",
    ]
    with pytest.raises(ValueError, match="already has a skill 'tower-of-three'"):
        library.add(macro)
    concrete = Skill(
        "swap-red-blue",
        "unstack the red block from the blue block",
        "take red off blue, then put blue on red",
        MacroExecutor(
            ("unstack the red block from the blue block", "stack the blue block on the red block")
        ),
    )
    library.add(concrete)
    assert [s.skill for s in library.decompose("unstack the red block from the blue block")] == [
        "unstack",
        "stack",
    ]
    assert library.decompose("unstack the green block from the blue block") == [
        parse("unstack the green block from the blue block")
    ]
    assert SkillLibrary.from_dict(library.to_dict()).to_dict() == library.to_dict()


def test_decompose_tower_into_stacks_bottom_up() -> None:
    library = default_library()
    assert library.decompose(TOWER) == [
        Instruction("stack", ("green", "red")),
        Instruction("stack", ("blue", "green")),
    ]
    assert library.decompose(TOWER, atomic=True) == [parse(TOWER)]
    four = Instruction("tower", ("yellow", "red", "green", "blue"))
    assert [str(s) for s in library.decompose(four)] == [
        "stack the red block on the yellow block",
        "stack the green block on the red block",
        "stack the blue block on the green block",
    ]
    assert library.decompose("pick up the red block") == [parse("pick up the red block")]


def test_a_macro_may_refine_the_skill_it_is_named_by() -> None:
    library = default_library()
    library.add(
        Skill(
            "stack-by-lifting",
            "stack the {0} block on the {1} block",
            "a stack is a lift, then a stack of the held block",
            MacroExecutor(("pick up the {0} block", "stack the {0} block on the {1} block")),
        )
    )
    assert [str(s) for s in library.decompose(TOWER)] == [
        "pick up the green block",
        "stack the green block on the red block",
        "pick up the blue block",
        "stack the blue block on the green block",
    ]


def test_bad_skills_and_unknown_names() -> None:
    library = default_library()
    with pytest.raises(ValueError, match="known skills: reach, lift, push, place") as error:
        library.get("juggle")
    assert "tower" in str(error.value)
    with pytest.raises(ValueError, match="must be named after it"):
        Skill("juggle", "juggle the <colour> block", "juggle a block", ScriptedExecutor())
    with pytest.raises(ValueError, match="is not an instruction"):
        Skill("bad", "pick up the {0} block", "x", MacroExecutor(("juggle the {0} block",)))
    with pytest.raises(ValueError, match="does not bind"):
        Skill("bad", "pick up the {0} block", "x", MacroExecutor(("stack {0} on {1}",)))
    with pytest.raises(ValueError, match="noise"):
        ScriptedExecutor(-1.0)
    without_stack = SkillLibrary(s for s in default_library() if s.name != "stack")
    with pytest.raises(ValueError, match="no skill in the library runs 'stack'"):
        without_stack.decompose(TOWER)


@pytest.mark.parametrize(
    ("template", "step"),
    [
        ("{0} {1} {2} {3} {4} {5}", "pick up the {5} block"),
        ("pick up the {0:{1}} block", "pick up the {0} block"),
        ("pick up the {0:{x}} block", "pick up the {0} block"),
        ("pick up the {0!r} block", "pick up the {0} block"),
        ("pick up the {0:>8} block", "pick up the {0} block"),
    ],
)
def test_macro_slots_that_cannot_be_filled_with_colours_are_value_errors(
    template: str, step: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="plain numbered slots"):
        Skill("bad", template, "x", MacroExecutor((step,)))
    library = default_library().to_dict()
    macro = {"kind": "macro", "steps": [step]}
    library["skills"].append(
        {"name": "bad", "template": template, "description": "x", "executor": macro}
    )
    path = tmp_path / "library.json"
    path.write_text(json.dumps(library))
    with pytest.raises(ValueError, match="plain numbered slots"):
        SkillLibrary.load(path)


def test_a_macro_whose_slots_are_out_of_order_is_refused() -> None:
    with pytest.raises(ValueError, match="in the order the instruction names them"):
        Skill(
            "stack-reversed",
            "stack the {1} block on the {0} block",
            "lift the top block, then stack it",
            MacroExecutor(("pick up the {1} block", "stack the {1} block on the {0} block")),
        )
    in_order = Skill(
        "stack-lifted",
        "stack the {0} block on the {1} block",
        "lift the top block, then stack it",
        MacroExecutor(("pick up the {0} block", "stack the {0} block on the {1} block")),
    )
    steps = in_order.bind(parse("stack the blue block on the red block"))
    assert [str(step) for step in steps or []] == [
        "pick up the blue block",
        "stack the blue block on the red block",
    ]


def test_learned_executor_loads_lazily_and_acts(tmp_path: Path) -> None:
    env = gym.make("GameOn/Lift-v0")
    path = tiny_checkpoint(tmp_path / "lift.pt", env)
    executor = LearnedExecutor(str(path))
    assert executor._actor is None
    instruction = parse("pick up the red block")
    observation, _ = env.reset(seed=0, options={"instruction": instruction})
    policy = executor.policy(env, instruction, seed=0)
    action = policy(observation)
    assert action.shape == (5,) and np.all(np.abs(action) <= 1.0)
    assert executor._actor is not None
    library = default_library()
    library.replace_executor("lift", executor)
    assert library.executor_for(instruction) is executor
    env.close()


def test_corrupt_checkpoint_is_a_value_error(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"\x00not a checkpoint")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        LearnedExecutor(str(corrupt)).load()
    with pytest.raises(ValueError, match="no checkpoint"):
        LearnedExecutor(str(tmp_path / "missing.pt")).load()
    with pytest.raises(ValueError, match="checkpoint must be a file path"):
        LearnedExecutor("")
