"""Coded skills in the collect loop: the slow agent picks, the fast agent codes, the oracle
verifies, the library stores the source, and the embodiment runs it in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("minari")

from gameon.experimenter.coded_api import TEMPLATES  # noqa: E402
from gameon.experimenter.embodiment import Embodiment  # noqa: E402
from gameon.experimenter.loop import LoopConfig, run_experiment  # noqa: E402
from gameon.experimenter.skills import CodedExecutor, SkillLibrary, default_library  # noqa: E402

TOWER = "build a tower of red, green and blue from the bottom up"


def test_a_coded_stack_builds_a_tower_in_the_embodiment_and_labels_its_steps() -> None:
    library = default_library()
    library.replace_executor("stack", CodedExecutor(TEMPLATES["stack"]))
    with Embodiment("GameOn/MultiSkill-v0", library) as embodiment:
        record = embodiment.execute(TOWER, seed=3)
    assert record.success and [o.executor for o in record.outcomes] == ["coded", "coded"]
    assert record.actor_steps() == {"scripted": 0, "learned": 0, "coded": record.steps}


def test_a_rejected_coded_skill_is_a_logged_failure_and_the_episode_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crashing = CodedExecutor("def skill(blocks):\n    raise ValueError('no idea')\n")
    library = default_library()
    library.replace_executor("lift", crashing)
    with Embodiment("GameOn/MultiSkill-v0", library, skill_budget={"lift": 30}) as embodiment:
        record = embodiment.execute("pick up the red block", seed=1)
    assert not record.success and record.steps == 30
    assert crashing.rejections == ["the skill raised ValueError: no idea"]
    assert "no idea" in caplog.text


def test_a_coded_skill_round_trips_through_the_library_json() -> None:
    library = default_library()
    verification = {"trials": 3, "successes": 3, "success_rate": 1.0}
    library.replace_executor("stack", CodedExecutor(TEMPLATES["stack"], verification))
    again = SkillLibrary.from_dict(json.loads(json.dumps(library.to_dict())))
    executor = again.get("stack").executor
    assert isinstance(executor, CodedExecutor)
    assert executor.source == TEMPLATES["stack"] and executor.verification == verification


def test_a_rules_collect_run_codes_a_skill_verifies_it_and_collects_with_it(
    tmp_path: Path,
) -> None:
    config = LoopConfig(
        env_id="GameOn/Stack-v0",
        practice_env_id="GameOn/Stack-v0",
        curriculum="vlm",
        vlm_backend="rules",
        vlm_code_skills=True,
        vlm_add_skills=False,
        collector="demo",
        iterations=2,
        episodes_per_iteration=2,
        seed_episodes=4,
        num_updates=20,
        eval_episodes_per_skill=1,
        target_eval_episodes=1,
        auto_stop=False,
    )
    record = run_experiment(config, tmp_path, progress=False)
    state = json.loads((tmp_path / "state.json").read_text())
    coding = state["history"][1]["vlm"]["coding"]
    decided = {d["skill"]: d["decision"] for d in coding["decisions"]}
    assert decided["stack"] in ("code", "replace")  # 20 updates leave stacking at 0
    (stack,) = [c for c in coding["coded"] if c["skill"] == "stack"]
    assert stack["added"] and stack["verification"]["trials"] == config.vlm_verify_trials
    assert stack["verification"]["successes"] >= 2
    entry = next(s for s in record.extra["library"]["skills"] if s["name"] == "stack")
    assert entry["executor"]["kind"] == "coded"
    assert entry["executor"]["source"] == stack["source"]
    assert entry["executor"]["verification"]["successes"] == stack["verification"]["successes"]
    collected = record.extra["iterations"][2]
    assert collected["executors"]["stack"] == "coded"
    assert collected["actor_steps"]["coded"] > 0 and collected["actor_steps"]["learned"] == 0
