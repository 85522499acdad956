"""Prompts in files, the rules backend's answers, the backend factory, prices, state and replay."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gameon.envs.language import COLOURS
from gameon.experimenter.curricula import make_curriculum
from gameon.experimenter.curriculum import (
    NO_VLM_USAGE,
    task_set,
    vlm_usage,
)
from gameon.experimenter.skills import default_library
from gameon.experimenter.vlm import (
    Backend,
    ReplayBackend,
    RulesBackend,
    Transcript,
    Usage,
    cost_usd,
    make_backend,
    modules,
)
from gameon.experimenter.vlm.estimate import prompt_sizes
from gameon.experimenter.vlm.prompts import MODULES, PROMPTS_DIR, extract_context, render_prompt
from gameon.experimenter.vlm.rules_backend import verdict
from gameon.experimenter.vlm_curriculum import VLMCurriculum
from gameon.records import VLMUsage

TASKS = task_set("GameOn/MultiSkill-v0")


def test_every_module_has_a_prompt_file_with_a_json_context() -> None:
    assert sorted(p.stem for p in PROMPTS_DIR.glob("*.md")) == sorted(MODULES)
    fields = {
        "propose": {"n": 2, "library": "L"},
        "decompose": {"task": "T", "library": "L"},
        "retrieve": {"step": "S", "library": "L"},
        "analyse": {"table": "|t|", "converged_level": 0.8},
        "add_skill": {"library": "L"},
        "code_or_learn": {"library": "L", "table": "|t|", "verified_level": 0.8},
        "write_code": {"name": "N", "template": "T", "description": "D", "api_reference": "A"},
    }
    context = {"a": [1, {"b": "{0} and {1}"}]}
    for module in MODULES:
        prompt = render_prompt(module, context, **fields[module])
        assert extract_context(prompt) == context and "$" not in prompt
    assert "{0}, {1} and {2}" in render_prompt("add_skill", {}, library="L")  # braces are safe
    with pytest.raises(ValueError, match="needs the field 'n'"):
        render_prompt("propose", context, library="L")
    with pytest.raises(ValueError, match="accepted: propose, decompose"):
        render_prompt("plan", context)


def test_an_edited_prompt_with_a_lone_dollar_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gameon.experimenter.vlm import prompts

    (tmp_path / "decompose.md").write_text("Costs $5.\n```json\n$context\n```\n")
    monkeypatch.setattr(prompts, "PROMPTS_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"decompose\.md: Invalid placeholder.*line 1.*\$\$"):
        render_prompt("decompose", {})


def test_only_the_prompts_of_modules_sent_an_image_mention_one() -> None:
    sizes = prompt_sizes("GameOn/MultiSkill-v0", 2)
    for module in MODULES:
        mentions = "image" in (PROMPTS_DIR / f"{module}.md").read_text().lower()
        assert mentions == (sizes[module][1] > 0), module


def test_rules_propose_follows_prerequisites_progress_and_stalls() -> None:
    library = make_curriculum("vlm", TASKS).library
    fresh = modules.propose_tasks(RulesBackend(), TASKS, {}, {}, library, 3)
    assert [t.split()[0] for t in fresh.tasks] == ["move"] * 3  # reach has no prerequisite
    skills = {"reach": {"success": 1.0}, "lift": {"success": 0.3}}
    after = modules.propose_tasks(RulesBackend(), TASKS, {}, skills, library, 3)
    assert all(t.startswith(("pick up", "push")) for t in after.tasks)
    stalled = {**skills, "lift": {"success": 0.3, "status": "stalled"}}
    tasks = {"push the red block to the left": {"attempts": 4, "successes": 1}}
    chosen = modules.propose_tasks(RulesBackend(), TASKS, tasks, stalled, library, 3).tasks
    assert chosen[0] == "push the red block to the left"
    assert not any(t.startswith("pick up") for t in chosen)


def test_rules_verdicts_from_slope_and_level() -> None:
    assert verdict([0.5], 0.8, 3, 0.05) == "improving"
    assert verdict([0.2, 0.5, 0.9], 0.8, 3, 0.05) == "converged"
    assert verdict([0.9, 0.95, 0.9], 0.8, 3, 0.05) == "converged"
    assert verdict([0.0, 0.2, 0.5], 0.8, 3, 0.05) == "improving"
    assert verdict([0.3, 0.3, 0.3], 0.8, 3, 0.05) == "stalled"
    assert verdict([0.6, 0.4, 0.2], 0.8, 3, 0.05) == "stalled"
    assert verdict([0.3, 0.3], 0.8, 3, 0.05) == "improving"


def test_retrieve_parses_then_matches_text_then_reports_unmatched() -> None:
    library = make_curriculum("vlm", TASKS).library
    colours = ("red", "green", "blue")
    assert modules.retrieve(None, "stack red on blue", library, colours).method == "parse"
    close = modules.retrieve(None, "pick up the red blocks", library, colours)
    assert (close.method, close.instruction) == ("similarity", "pick up the red block")
    lost = modules.retrieve(None, "juggle", library, colours)
    assert lost.method == "unmatched" and lost.instruction is None
    assert modules.retrieve(None, "pick up the purple block", library, colours).method != "parse"


def test_retrieve_never_rewrites_a_step_into_another_block_or_meaning() -> None:
    library = make_curriculum("vlm", TASKS).library
    colours = ("red", "green", "blue")
    rules = RulesBackend()
    absent = modules.retrieve(rules, "pick up the purple block", library, colours)
    assert (absent.method, absent.instruction) == ("unmatched", None)
    assert "no purple block" in absent.reason and rules.calls == 0
    for step in ("do not stack the red block on the blue block", "pick up the bleu block"):
        found = modules.retrieve(None, step, library, colours)
        assert (found.method, found.instruction) == ("unmatched", None), step
    typo = modules.retrieve(None, "move the griper above the green block", library, colours)
    assert (typo.method, typo.instruction) == (
        "similarity",
        "move the gripper above the green block",
    )


class Canned(Backend):
    """A backend that gives the same JSON answer to every request, keeping the prompts."""

    def __init__(self, answer: dict) -> None:
        super().__init__("canned", "test")
        self.answer = json.dumps(answer)
        self.prompts: list[str] = []

    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        self.prompts.append(prompt)
        return self.answer, Usage()


@pytest.mark.parametrize(
    ("template", "step", "error"),
    [
        ("{0} {1} {2} {3} {4} {5}", "pick up the {5} block", "plain numbered slots"),
        ("pick up the {0:{1}} block", "pick up the {0} block", "plain numbered slots"),
        ("pick up the {0:{x}} block", "pick up the {0} block", "plain numbered slots"),
        ("stack the {1} block on the {0} block", "pick up the {1} block", "in the order"),
    ],
)
def test_an_unusable_macro_is_re_asked_then_falls_back(
    template: str, step: str, error: str
) -> None:
    spec = {"name": "m", "template": template, "steps": [step], "description": "d"}
    backend = Canned({"skill": spec, "rationale": ""})
    curriculum = VLMCurriculum(TASKS, backend, library=default_library())
    assert curriculum.propose_skill() == (None, "")
    assert curriculum.fallbacks == 1 and "m" not in curriculum.library
    assert len(backend.prompts) == 3 and error in backend.prompts[1]


FOUR_BLOCK_MACRO = {
    "name": "tower_of_four",
    "template": "build a tower of {0}, {1}, {2} and {3} from the bottom up",
    "steps": ["stack the {1} block on the {0} block", "stack the {2} block on the {1} block"],
    "description": "d",
}


def test_a_macro_naming_more_blocks_than_the_scene_has_is_re_asked_then_falls_back() -> None:
    """In a 3-block scene a macro of slots {0} .. {3} was accepted, then its verification
    formatted the template with 3 colours: an IndexError ended the run (and every resume)."""
    backend = Canned({"skill": FOUR_BLOCK_MACRO, "rationale": ""})
    curriculum = VLMCurriculum(TASKS, backend, library=default_library())
    assert curriculum.propose_skill(blocks=3) == (None, "")
    assert curriculum.fallbacks == 1 and "tower_of_four" not in curriculum.library
    assert "names 4 blocks; the scene has 3, so a macro may name at most 3" in backend.prompts[1]
    skill, _ = VLMCurriculum(TASKS, backend, library=default_library()).propose_skill(blocks=4)
    assert skill is not None and skill.blocks == 4


def test_steps_retrieved_by_parse_are_not_counted_as_answers_used() -> None:
    """A decomposition's steps that parse are matched without a request: counting them made
    "answers used" exceed "calls answered" (11 calls, 16 answers used)."""
    steps = ["stack the green block on the red block", "stack the blue block on the green block"]
    backend = Canned({"steps": steps, "rationale": ""})
    curriculum = VLMCurriculum(TASKS, backend, library=default_library())
    plan = curriculum.plan("build a tower of red, green and blue from the bottom up", COLOURS[:3])
    assert [r.method for r in plan.retrievals] == ["parse", "parse"]
    assert backend.calls == 1 and curriculum.used_answers == 1


class Scripted(Backend):
    """A backend that gives its JSON answers in order, keeping the prompts."""

    def __init__(self, *answers: dict) -> None:
        super().__init__("scripted", "test")
        self.answers = [json.dumps(answer) for answer in answers]
        self.prompts: list[str] = []

    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        self.prompts.append(prompt)
        return self.answers.pop(0), Usage()


def test_an_answer_missing_its_decision_key_is_re_asked_and_extra_keys_are_ignored() -> None:
    library, colours = default_library(), ("red", "green", "blue")
    stack = {"skill": "stack", "instruction": "stack the red block on the green block"}
    backend = Scripted({"skil": "stack", "instruction": None}, {**stack, "confidence": 0.9})
    found = modules.retrieve(backend, "put red onto green", library, colours)
    assert (found.method, found.instruction) == ("model", stack["instruction"])
    assert "skill: Field required" in backend.prompts[1]

    backend = Scripted({"macro": {"name": "m"}}, {"skill": None, "notes": "none is due"})
    assert modules.propose_skill(backend, library, {}) == (None, "")
    assert "skill: Field required" in backend.prompts[1]

    code = {"skill": "stack", "decision": "code", "reason": "stalled"}
    backend = Scripted({"tasks": ["stack the red block on the green block"]}, {"decisions": [code]})
    answer = modules.decide_code_or_learn(backend, library, {}, {}, {})
    assert {d.skill: d.decision for d in answer.decisions}["stack"] == "code"
    assert "decisions: Field required" in backend.prompts[1]


def test_a_too_deeply_nested_coded_skill_is_re_asked_then_falls_back() -> None:
    source = "def skill(blocks):\n    x = 1" + "+1" * 250 + "\n"
    backend = Canned({"source": source, "rationale": ""})
    curriculum = VLMCurriculum(TASKS, backend, library=default_library())
    assert curriculum.write_code("stack") is None and curriculum.fallbacks == 1
    assert len(backend.prompts) == 3 and "nested too deeply" in backend.prompts[1]


def test_make_backend_names_what_is_wrong(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\(--vlm-backend\); accepted: rules, gemini, openai"):
        make_backend("claude")
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="GEMINI_API_KEY.*GOOGLE_API_KEY"):
        make_backend("gemini")
    with pytest.raises(ValueError, match=r"needs a transcript: give replay_path \(--vlm-replay"):
        make_backend("replay")
    with pytest.raises(ValueError, match=r"no transcript to replay at .* \(replay_path, --vlm-"):
        make_backend("replay", replay_path=tmp_path)
    (tmp_path / "state.json").write_text('{\n "iterations": 1\n}\n')  # not a transcript
    with pytest.raises(ValueError, match="records no VLM call to replay"):
        make_backend("replay", replay_path=tmp_path / "state.json")
    (tmp_path / "other.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ValueError, match="is not a VLM transcript: its call 1 has no"):
        make_backend("replay", replay_path=tmp_path / "other.jsonl")
    with pytest.raises(ValueError, match=r"takes no model \(--vlm-model\) or base_url \(--vlm-b"):
        make_backend("rules", model="x")
    with pytest.raises(ValueError, match=r"replay path \(replay_path, --vlm-replay\) is only"):
        make_backend("rules", replay_path=tmp_path)
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(ValueError, match="MY_KEY"):
        make_backend("openai", base_url="https://example.invalid/v1", api_key_env="MY_KEY")
    local = make_backend("openai", "llava", base_url="http://localhost:11434/v1")
    assert (local.name, local.model) == ("openai", "llava")


def test_costs_are_estimates_and_zero_without_a_priced_model() -> None:
    usage = Usage(1_000_000, 100_000)
    assert cost_usd("gemini", "gemini-2.5-flash", usage) == pytest.approx(0.30 + 0.25)
    assert cost_usd("rules", "rules-v1", usage) == 0.0
    assert cost_usd("replay", "gemini-2.5-flash", usage) == 0.0
    assert cost_usd("openai", "my-local-llava", usage) == 0.0


def test_usage_has_the_record_fields_and_zeros_without_a_model() -> None:
    vlm = make_curriculum("vlm", TASKS)
    assert set(vlm.usage()) == set(VLMUsage.model_fields) == set(NO_VLM_USAGE)
    assert VLMUsage(**vlm.usage()).backend == "rules"
    assert vlm_usage(make_curriculum("lp", TASKS)) == VLMUsage().model_dump()


def test_state_dict_resumes_the_same_proposals() -> None:
    def run(vlm: VLMCurriculum, n: int) -> list[str]:
        picks = []
        for i in range(n):
            picks.append(vlm.propose())
            vlm.update(picks[-1], i % 3 == 0, 0.0)
        return picks

    through = make_curriculum("vlm", TASKS, 1, interval=4)
    first = run(through, 10)
    resumed = make_curriculum("vlm", TASKS, 1, interval=4)
    run(resumed, 10)
    state = json.loads(json.dumps(resumed.state_dict()))
    again = make_curriculum("vlm", TASKS, 1, interval=4)
    again.load_state_dict(state)
    assert first and run(again, 10) == run(through, 10)
    assert again.usage() == through.usage()
    with pytest.raises(ValueError, match="'lp'"):
        again.load_state_dict(make_curriculum("lp", TASKS).state_dict())


def test_replay_answers_in_module_order_when_an_image_differs(tmp_path: Path) -> None:
    library = make_curriculum("vlm", TASKS).library
    recorded = modules.propose_tasks(
        RulesBackend(Transcript(tmp_path / "run")),
        TASKS,
        {},
        {},
        library,
        2,
        np.zeros((4, 4, 3), np.uint8),
    )
    replay = ReplayBackend(tmp_path / "run")
    other_image = np.full((4, 4, 3), 9, np.uint8)
    again = modules.propose_tasks(replay, TASKS, {}, {}, library, 2, other_image)
    assert again == recorded and replay.order_matches == 1
