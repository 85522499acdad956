"""The collect loop with the vlm curriculum: a rules run, its replay, plans, analysis, skills."""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")
pytest.importorskip("minari")
pytest.importorskip("matplotlib")

from gameon.experimenter.coded_api import TEMPLATES  # noqa: E402
from gameon.experimenter.curriculum import task_set  # noqa: E402
from gameon.experimenter.loop import LoopConfig, run_experiment  # noqa: E402
from gameon.experimenter.skills import LearnedExecutor, ScriptedExecutor, default_library  # noqa: E402
from gameon.experimenter.vlm import RulesBackend, Transcript, collect  # noqa: E402
from gameon.experimenter.vlm.backend import Backend, Usage, replayable_entries  # noqa: E402
from gameon.experimenter.vlm.collect import (  # noqa: E402
    PlannedEmbodiment,
    add_verified_skill,
    analyse_and_promote,
    plan_tasks,
)
from gameon.experimenter.vlm.modules import CodedSkillAnswer, SkillDecision  # noqa: E402
from gameon.experimenter.vlm_curriculum import VLMCurriculum  # noqa: E402
from gameon.records import RunRecord, load_record  # noqa: E402

MULTI = "GameOn/MultiSkill-v0"
TINY_VLM = LoopConfig(
    env_id="GameOn/Reach-v0",
    practice_env_id=MULTI,
    curriculum="vlm",
    vlm_backend="rules",
    iterations=2,
    episodes_per_iteration=3,
    seed_episodes=3,
    num_updates=200,
    eval_episodes_per_skill=1,
    auto_stop=False,
)
VOLATILE = {"run_id", "created", "wall_seconds", "steps_per_second", "curriculum_label"}


@pytest.fixture(scope="module")
def rules_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunRecord]:
    run_dir = tmp_path_factory.mktemp("vlm_rules")
    return run_dir, run_experiment(TINY_VLM, run_dir, progress=False)


def decisions(run_dir: Path) -> list[dict]:
    """What the experimenter decided per iteration: tasks, proposals, plans, verdicts, skills."""
    state = json.loads((run_dir / "state.json").read_text())
    return [
        {"tasks": h["tasks"], "plans": h["plans"], "vlm": h.get("vlm"), "executors": h["executors"]}
        for h in state["history"]
    ]


def comparable(record: RunRecord) -> dict:
    """A record without what differs between a run and its replay: time, ids, backend names,
    the training config (it names the backend) and the checkpoint file's hash (the file stores
    its run folder); the weights' hash stays, so the replay must train the same weights."""
    data = record.model_dump(mode="json", exclude=VOLATILE | {"training", "checkpoint_sha256"})
    data["vlm"] = {k: v for k, v in data["vlm"].items() if k not in ("backend", "model")}
    config = data["extra"]["config"]
    for key in ("vlm_backend", "vlm_replay"):
        config.pop(key)
    for iteration in data["extra"]["iterations"]:
        iteration["curriculum"].pop("label")
    return data


def test_rules_run_is_labelled_and_records_its_vlm_usage(rules_run: tuple[Path, RunRecord]) -> None:
    run_dir, record = rules_run
    assert record.curriculum == "vlm" and record.curriculum_label == "vlm[rules]"
    assert load_record(run_dir / "record.json") == record
    entries = Transcript(run_dir).entries()
    modules = [e["module"] for e in entries]
    assert record.vlm.backend == "rules" and record.vlm.calls == len(entries)
    assert record.vlm.cost_usd == 0.0 and record.vlm.fallbacks == 0
    # each of the 2 iterations: propose, a decompose per distinct task, analyse, add_skill
    assert modules.count("propose") == 2 and modules.count("analyse") == 2
    assert modules.count("add_skill") == 2 and modules.count("decompose") >= 2
    propose = next(e for e in entries if e["module"] == "propose")
    (digest,) = propose["images"]  # the front camera's view of the scene
    assert (run_dir / "images" / f"{digest}.png").read_bytes()[:4] == b"\x89PNG"
    state = json.loads((run_dir / "state.json").read_text())
    assert state["vlm"] == record.vlm.model_dump()
    for h in state["history"][1:]:
        report = h["vlm"]
        assert report["source"] == "vlm" and set(h["tasks"]) <= set(report["proposal"])
        assert set(report["analysis"]) == set(state["curves"])
        assert all(plan["used"] and not plan["unmatched"] for plan in report["plans"])
        planned = {plan["task"]: plan["steps"] for plan in report["plans"]}
        assert [planned[task] for task in h["tasks"]] == h["plans"]


def test_replay_reproduces_the_decisions_and_the_record(
    rules_run: tuple[Path, RunRecord], tmp_path: Path
) -> None:
    run_dir, record = rules_run
    config = replace(TINY_VLM, vlm_backend="replay", vlm_replay=str(run_dir / "transcript.jsonl"))
    replayed = run_experiment(config, tmp_path, progress=False)
    assert replayed.curriculum_label == "vlm[replay]"
    assert decisions(tmp_path) == decisions(run_dir)
    assert comparable(replayed) == comparable(record)
    assert [e["parsed"] for e in Transcript(tmp_path).entries()] == [
        e["parsed"] for e in Transcript(run_dir).entries()
    ]


def test_a_resumed_run_marks_the_calls_of_its_abandoned_iteration(
    rules_run: tuple[Path, RunRecord], tmp_path: Path
) -> None:
    run_dir, _ = rules_run
    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    committed = json.loads((resumed / "state.json").read_text())["transcript_entries"]
    assert committed == len(Transcript(run_dir).entries())
    transcript = resumed / "transcript.jsonl"
    with open(transcript, "a") as f:  # a call of an iteration 3 that a kill ended
        f.write(transcript.read_text().splitlines()[-1] + "\n")
    run_experiment(replace(TINY_VLM, iterations=3), resumed, progress=False)
    notes = [e for e in map(json.loads, transcript.read_text().splitlines()) if "kind" in e]
    assert notes == [{"kind": "resume", "abandoned": [committed, committed + 1]}]
    state = json.loads((resumed / "state.json").read_text())
    assert state["transcript_entries"] == len(Transcript(resumed).entries())
    assert len(replayable_entries(transcript)) == state["transcript_entries"] - 1


def test_gemini_without_a_key_is_refused_naming_the_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    # said as it is, not as "curriculum 'vlm' cannot train for GameOn/Reach-v0 (...): no ..."
    with pytest.raises(ValueError, match="^no Gemini API key.*GEMINI_API_KEY.*GOOGLE"):
        run_experiment(replace(TINY_VLM, vlm_backend="gemini"), tmp_path / "run", False)
    assert not (tmp_path / "run").exists()


def test_analysis_promotes_only_converged_skills() -> None:
    library = default_library(noise=0.1)
    library.replace_executor("lift", LearnedExecutor("old.pt"))
    vlm = VLMCurriculum(task_set(MULTI), RulesBackend(), interval=None)
    curves = {"reach": [0.9, 1.0, 1.0], "lift": [0.2, 0.6, 0.9], "push": [0.85]}
    rates = {skill: values[-1] for skill, values in curves.items()} | {"stack": 0.1}
    statuses = analyse_and_promote(vlm, library, curves, rates, "new.pt", 0.8, 0.1)
    assert statuses == {"reach": "converged", "lift": "converged", "push": "improving"}
    assert library.get("reach").executor == LearnedExecutor("new.pt")
    assert library.get("lift").executor == LearnedExecutor("new.pt")
    assert library.get("push").executor == ScriptedExecutor(0.1)  # high, not yet converged
    assert library.get("stack").executor == ScriptedExecutor(0.1)


def test_stalled_skills_are_sampled_less() -> None:
    vlm = VLMCurriculum(task_set(MULTI), RulesBackend(), seed=0, interval=None, stalled_weight=0.1)
    vlm.proposal, vlm.source, vlm.consults = (
        ["pick up the red block", "push the red block to the left"],
        "vlm",
        1,
    )
    vlm.statuses = {"lift": "stalled"}
    picks = [vlm.propose() for _ in range(200)]
    assert picks.count("pick up the red block") < 40


def test_plans_run_and_a_verified_macro_joins_the_library(tmp_path: Path) -> None:
    library = default_library()
    vlm = VLMCurriculum(
        task_set(MULTI), RulesBackend(Transcript(tmp_path)), library=library, interval=None
    )
    with PlannedEmbodiment(MULTI, library) as embodiment:
        tower = "build a tower of red, green and blue from the bottom up"
        (report,) = plan_tasks(vlm, embodiment, [tower, tower])
        assert report["used"] and report["methods"] == ["parse", "parse"]
        assert embodiment.plans[tower] == report["steps"]
        assert [str(s) for s in embodiment.plan(tower)] == report["steps"]
        assert add_verified_skill(vlm, embodiment, [1, 2], 0.5) is None  # stack not yet reliable
        vlm.curves = {"stack": [0.5, 0.9]}
        added = add_verified_skill(vlm, embodiment, [1, 2], 0.5)
    assert added["skill"]["name"] == "tower_of_stacks" and added["trials"] == 2
    assert added["added"] and added["successes"] == 2 and added["env_steps"] > 0
    assert library.get("tower_of_stacks").is_macro and vlm.rejected == []
    modules = [e["module"] for e in Transcript(tmp_path).entries()]
    assert modules == ["decompose", "add_skill", "add_skill"]


def test_a_macro_for_more_blocks_than_the_scene_falls_back_rather_than_ending_the_run() -> None:
    """add_verified_skill tells the model the scene's block count: a 4-block macro in this
    3-block scene is re-asked, then falls back; it used to end the run with an IndexError."""
    macro = {
        "name": "tower_of_four",
        "template": "build a tower of {0}, {1}, {2} and {3} from the bottom up",
        "steps": ["stack the {1} block on the {0} block"],
        "description": "d",
    }
    answers = []

    class FourBlocks(Backend):
        def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
            answers.append(prompt)
            return json.dumps({"skill": macro, "rationale": ""}), Usage()

    backend = FourBlocks("four-blocks", "test")
    library = default_library()
    vlm = VLMCurriculum(task_set(MULTI), backend, library=library, interval=None)
    with PlannedEmbodiment(MULTI, library) as embodiment:
        assert add_verified_skill(vlm, embodiment, [1], 0.5) is None
    assert vlm.fallbacks == 1 and "tower_of_four" not in library
    assert "names 4 blocks; the scene has 3" in answers[1]


def test_a_macro_joins_when_its_trial_rate_equals_the_threshold(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # 14 of 25 trials is 0.56, but 0.56 * 25 is 14.000000000000002 in floats: comparing the
    # count with threshold * trials rejected the macro.
    library = default_library()
    vlm = VLMCurriculum(
        task_set(MULTI), RulesBackend(Transcript(tmp_path)), library=library, interval=None
    )
    vlm.curves = {"stack": [0.5, 0.9]}
    monkeypatch.setattr(collect, "verify_skill", lambda *args: (14, 100))
    with PlannedEmbodiment(MULTI, library) as embodiment:
        added = add_verified_skill(vlm, embodiment, list(range(25)), 0.56)
    assert added["successes"] == 14 and added["added"] and "tower_of_stacks" in library


def test_a_coded_skill_joins_when_its_trial_rate_equals_the_threshold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As for macros: 14 of 25 trials did not pass a threshold of 0.56.
    library = default_library()
    decision = SkillDecision(skill="lift", decision="code")
    curriculum = SimpleNamespace(
        decide_code_or_learn=lambda coded: [decision],
        write_code=lambda skill: CodedSkillAnswer(source=TEMPLATES["lift"]),
        record_code_failure=lambda skill, reason: None,
    )
    trials = {"trials": 25, "successes": 14, "success_rate": 0.56}
    monkeypatch.setattr(collect, "namespace_command", lambda: [])
    monkeypatch.setattr(collect, "verify_coded", lambda *args: trials)
    embodiment = SimpleNamespace(library=library)
    report = collect.code_skills(curriculum, embodiment, task_set(MULTI), list(range(25)), 0.56)
    assert report["coded"][0]["added"] and library.get("lift").executor.kind == "coded"


class RulesSpeakingGemini:
    """A local server that speaks Gemini's generateContent wire format and answers each prompt
    with the rules backend, so a gemini run must make the rules run's decisions."""

    TITLES = {
        "# Task proposal": "propose",
        "# Task decomposition": "decompose",
        "# Skill retrieval": "retrieve",
        "# Training analysis": "analyse",
        "# Skill addition": "add_skill",
    }

    def __init__(self) -> None:
        rules = RulesBackend()
        paths: list[str] = []
        self.paths = paths

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                paths.append(self.path)
                request = json.loads(self.rfile.read(int(self.headers["content-length"])))
                parts = request["contents"][-1]["parts"]
                prompt = "\n".join(part["text"] for part in parts if "text" in part)
                module = RulesSpeakingGemini.TITLES[prompt.splitlines()[0].strip()]
                schema = request["generationConfig"]["responseJsonSchema"]
                answer, _ = rules._complete_request(prompt, [], schema, "", module)
                body = json.dumps(
                    {
                        "candidates": [{"content": {"role": "model", "parts": [{"text": answer}]}}],
                        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_gemini_backend_runs_the_same_loop_when_a_key_is_present(
    rules_run: tuple[Path, RunRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "AIza-test-key-never-written-0123456789"
    monkeypatch.setenv("GEMINI_API_KEY", key)
    for name in ("GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)
    server = RulesSpeakingGemini()
    try:
        config = replace(TINY_VLM, vlm_backend="gemini", vlm_base_url=server.url)
        record = run_experiment(config, tmp_path, progress=False)
    finally:
        server.close()
    run_dir, rules_record = rules_run
    assert record.curriculum_label == "vlm[gemini:gemini-2.5-flash]"
    assert record.vlm.model == "gemini-2.5-flash"
    assert all(":generateContent" in path for path in server.paths)
    assert [d["tasks"] for d in decisions(tmp_path)] == [d["tasks"] for d in decisions(run_dir)]
    assert [d["plans"] for d in decisions(tmp_path)] == [d["plans"] for d in decisions(run_dir)]
    assert record.vlm.calls == rules_record.vlm.calls == len(server.paths)
    assert record.vlm.prompt_tokens == 100 * record.vlm.calls
    assert record.vlm.completion_tokens == 20 * record.vlm.calls
    assert record.vlm.cost_usd > 0 and record.vlm.fallbacks == 0
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or key.encode() not in path.read_bytes(), path
