"""Coded skills' modules: the slow agent decides code or learn, the fast agent writes the code.

The rules stand-in's answers to both; the sandbox's check as validation, re-asked through the
real openai and google-genai clients against local servers (a source importing os, then a good
one); the slow agent's checks (unknown skill, macro, repeated skill, verified code); and the
replay of a rules transcript.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_http import Scripted, ScriptedServer, gemini_reply, openai_reply

from gameon.experimenter.coded_api import API_REFERENCE, TEMPLATES
from gameon.experimenter.curriculum import task_set
from gameon.experimenter.sandbox import check_source
from gameon.experimenter.skills import MacroExecutor, Skill, SkillLibrary, default_library
from gameon.experimenter.vlm import (
    Backend,
    GeminiBackend,
    ReplayBackend,
    RulesBackend,
    Transcript,
    Usage,
    VLMError,
    make_backend,
    modules,
)
from gameon.experimenter.vlm.collect import code_skills
from gameon.experimenter.vlm.prompts import extract_context
from gameon.experimenter.vlm.rules_backend import TOWER_MACRO

OPENAI_KEY = "sk-coded-SECRET-345"
GEMINI_KEY = "AIza-coded-SECRET-678"
GEMINI_MODEL = "gemini-test"
BAD_SOURCE = "import os\n\n\ndef skill(blocks):\n    os.system('true')\n"
CURVES = {
    "reach": [0.2, 0.6, 0.9],
    "lift": [0.1, 0.1, 0.1],
    "place": [0.0, 0.05],
    "stack": [0.3, 0.3, 0.3],
    "push": [0.0, 0.0, 0.0],
}
OPEN = ["reach", "lift", "push", "place", "unstack"]
"""the library's non-macro skills but stack, coded and verified in these tests, and tower, which
runs as its stacks"""


def library() -> SkillLibrary:
    """The default library plus a tower macro (which may never be coded)."""
    lib = default_library()
    steps = MacroExecutor(tuple(TOWER_MACRO["steps"]))
    lib.add(Skill(TOWER_MACRO["name"], TOWER_MACRO["template"], TOWER_MACRO["description"], steps))
    return lib


def statuses() -> dict[str, str]:
    """The rules analysis of CURVES: reach converged, place improving, the others stalled."""
    verdicts = modules.analyse(RulesBackend(), CURVES)
    return {skill: verdict.status for skill, verdict in verdicts.items()}


def decisions(answer: modules.CodeOrLearn) -> dict[str, str]:
    return {d.skill: d.decision for d in answer.decisions}


class Canned(Backend):
    """Answers with the given JSON objects in order."""

    def __init__(self, transcript: Transcript, *answers: object) -> None:
        super().__init__("canned", "test", transcript)
        self.answers = [json.dumps(answer) for answer in answers]

    def _complete(self, prompt: str, images: list[bytes], schema: dict) -> tuple[str, Usage]:
        return self.answers.pop(0), Usage()


# -- the rules stand-in -------------------------------------------------------------------------


def test_rules_code_stalled_or_low_skills_with_a_source_and_learn_the_rest() -> None:
    lib = library()
    assert statuses() == {
        "reach": "converged",
        "lift": "stalled",
        "place": "improving",
        "stack": "stalled",
        "push": "stalled",
    }
    answer = modules.decide_code_or_learn(RulesBackend(), lib, statuses(), CURVES, {"stack": 1.0})
    assert [d.skill for d in answer.decisions] == OPEN  # stack is settled, the macro never open
    assert decisions(answer) == {
        "reach": "learn",  # converged
        "lift": "replace",  # stalled, with a reference source
        "push": "learn",  # stalled, but no reference source
        "place": "code",  # 0.05 after 2 points
        "unstack": "learn",
    }
    # code that failed verification is not asked for again: the reference source failed
    again = modules.decide_code_or_learn(RulesBackend(), lib, statuses(), CURVES, {"lift": 0.25})
    assert decisions(again)["lift"] == "learn" and decisions(again)["stack"] == "replace"
    fresh = modules.decide_code_or_learn(RulesBackend(), lib, {}, {}, {})
    assert set(decisions(fresh).values()) == {"learn"}


def test_rules_write_the_reference_source_and_fail_honestly_without_one(tmp_path: Path) -> None:
    lib = library()
    for name, source in TEMPLATES.items():
        answer = modules.write_skill_code(RulesBackend(), lib.get(name), API_REFERENCE)
        assert answer.source == source and name in answer.rationale
        check_source(answer.source)
    rules = RulesBackend(Transcript(tmp_path))
    with pytest.raises(VLMError, match="write_code"):
        modules.write_skill_code(rules, lib.get("push"), API_REFERENCE)
    entries = Transcript(tmp_path).entries()
    assert [e["attempt"] for e in entries] == [0, 1, 2]
    assert all("sandbox rejected" in e["error"] for e in entries)


def test_prompts_carry_the_skill_api_failures_and_curves(tmp_path: Path) -> None:
    lib = library()
    failures = ["oracle: the red block ended 6 cm from the target", "sandbox: name 'os'"]
    modules.write_skill_code(RulesBackend(Transcript(tmp_path)), lib.get("lift"), "API", failures)
    modules.decide_code_or_learn(
        RulesBackend(Transcript(tmp_path)), lib, statuses(), CURVES, {"stack": 1.0}
    )
    write, decide = (entry["prompt"] for entry in Transcript(tmp_path).entries())
    context = extract_context(write)
    assert context["failures"] == failures and context["skill"]["name"] == "lift"
    assert lib.get("lift").template in write and "def skill(blocks):" in write
    assert "## API\n\nAPI\n" in write and not re.search(r"\$[a-z]", write)
    context = extract_context(decide)
    assert context["open"] == OPEN and context["macros"] == [TOWER_MACRO["name"]]
    assert context["composed"] == ["tower"]
    assert {e["skill"]: e["coded_success"] for e in context["skills"]}["stack"] == 1.0
    assert "| lift | 0.10 | 0.10 | 0.10 |" in decide and not re.search(r"\$[a-z]", decide)


# -- the slow agent's checks ----------------------------------------------------------------------


def test_code_or_learn_rejects_unknown_skills_macros_and_repeats(tmp_path: Path) -> None:
    lib = library()
    bad = Canned(
        Transcript(tmp_path / "bad"),
        {"decisions": [{"skill": "juggle", "decision": "code"}]},
        {"decisions": [{"skill": TOWER_MACRO["name"], "decision": "code"}]},
        {"decisions": [{"skill": "tower", "decision": "replace"}]},
        {
            "decisions": [
                {"skill": "lift", "decision": "code"},
                {"skill": "lift", "decision": "learn"},
            ]
        },
    )
    bad.max_reasks = 3
    with pytest.raises(VLMError, match="repeated: \\['lift'\\]"):
        modules.decide_code_or_learn(bad, lib, statuses(), CURVES, {})
    errors = [e["error"] for e in Transcript(tmp_path / "bad").entries()]
    assert "unknown skill 'juggle'" in errors[0]
    assert "is a macro" in errors[1]
    assert "'tower' runs as other skills' steps" in errors[2]  # its code would never run
    assert "at most once" in errors[3]


def test_code_or_learn_keeps_verified_code_and_fills_in_learn(tmp_path: Path) -> None:
    lib = library()
    canned = Canned(
        Transcript(tmp_path),
        {"decisions": [{"skill": "stack", "decision": "replace", "reason": "stalled"}]},
        {
            "decisions": [
                {"skill": "lift", "decision": "replace", "reason": "stalled"},
                {"skill": TOWER_MACRO["name"], "decision": "learn"},
                {"skill": "stack", "decision": "learn"},
            ],
            "summary": "code lift",
        },
    )
    answer = modules.decide_code_or_learn(canned, lib, statuses(), CURVES, {"stack": 0.9})
    first, second = Transcript(tmp_path).entries()
    assert "coded and verified already" in first["error"] and second["error"] is None
    assert [d.skill for d in answer.decisions] == OPEN
    assert decisions(answer) == {name: "replace" if name == "lift" else "learn" for name in OPEN}
    assert answer.decisions[1].reason == "stalled" and answer.summary == "code lift"


# -- the fast agent through the real clients -------------------------------------------------------


class Provider:
    """One wire format: its server, a scripted reply and its backend (as in test_vlm_wire)."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "openai":
            self.server = ScriptedServer("/v1/chat/completions")
        else:
            self.server = ScriptedServer(re.compile(rf"/v1(beta)?/models/{GEMINI_MODEL}:.*"))

    def reply(self, content: str) -> Scripted:
        """A successful reply whose answer text is `content`."""
        return openai_reply(content) if self.name == "openai" else gemini_reply(content)

    def backend(self, run_dir: Path) -> Backend:
        transcript = Transcript(run_dir)
        if self.name == "openai":
            return make_backend(
                "openai",
                "gpt-4o-mini",
                base_url=f"{self.server.url}/v1",
                transcript=transcript,
                retries=0,
                timeout=5.0,
            )
        return GeminiBackend(
            GEMINI_MODEL, base_url=self.server.url, timeout=5.0, attempts=1, transcript=transcript
        )

    @property
    def key(self) -> str:
        return OPENAI_KEY if self.name == "openai" else GEMINI_KEY


@pytest.fixture(params=["openai", "gemini"])
def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Provider]:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    for name in (
        "OPENAI_BASE_URL",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GEMINI_BASE_URL",
        "GOOGLE_GENAI_API_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)
    p = Provider(request.param)
    yield p
    p.server.close()


def code_answer(source: str) -> str:
    return json.dumps({"source": source, "rationale": "moves above the block"})


def assert_no_key(provider: Provider, run_dir: Path) -> None:
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert files and all(provider.key.encode() not in p.read_bytes() for p in files)


def test_source_importing_os_is_reasked_then_fails(provider: Provider, tmp_path: Path) -> None:
    provider.server.script(*[provider.reply(code_answer(BAD_SOURCE))] * 3)
    backend = provider.backend(tmp_path)
    with pytest.raises(VLMError, match="sandbox rejected"):
        modules.write_skill_code(backend, default_library().get("reach"), API_REFERENCE)
    entries = Transcript(tmp_path).entries()
    assert [e["attempt"] for e in entries] == [0, 1, 2] and len(provider.server.requests) == 3
    assert all("sandbox rejected" in e["error"] and e["parsed"] is None for e in entries)
    assert "Your previous answer was invalid: the sandbox rejected" in entries[1]["prompt"]
    assert backend.calls == 3
    assert_no_key(provider, tmp_path)


def test_bad_then_good_source_is_accepted_after_one_reask(
    provider: Provider, tmp_path: Path
) -> None:
    good = TEMPLATES["reach"]
    provider.server.script(
        provider.reply(code_answer(BAD_SOURCE)), provider.reply(code_answer(good))
    )
    failures = ["oracle: the gripper stopped 5 cm from the red block"]
    backend = provider.backend(tmp_path)
    answer = modules.write_skill_code(
        backend, default_library().get("reach"), API_REFERENCE, failures
    )
    assert answer.source == good and answer.rationale == "moves above the block"
    first, second = Transcript(tmp_path).entries()
    assert first["error"] and second["error"] is None and second["attempt"] == 1
    assert second["parsed"]["source"] == good
    assert API_REFERENCE in first["prompt"] and failures[0] in first["prompt"]
    assert len(provider.server.requests) == 2 and backend.total_usage == Usage(200, 40)
    assert_no_key(provider, tmp_path)


# -- replay ---------------------------------------------------------------------------------------


def ask_everything(backend: Backend) -> tuple[modules.CodeOrLearn, list[str]]:
    """The slow agent's decisions, then the fast agent's source for each skill to code."""
    lib = library()
    answer = modules.decide_code_or_learn(backend, lib, statuses(), CURVES, {"stack": 1.0})
    sources = []
    for name in ("lift", "place", "push"):
        try:
            sources.append(modules.write_skill_code(backend, lib.get(name), API_REFERENCE).source)
        except VLMError as error:
            sources.append(f"failed: {type(error).__name__}")
    return answer, sources


def test_replay_of_a_rules_transcript_gives_the_same_answers(tmp_path: Path) -> None:
    recorded = ask_everything(RulesBackend(Transcript(tmp_path / "run")))
    assert recorded[1] == [TEMPLATES["lift"], TEMPLATES["place"], "failed: VLMError"]
    replay = ReplayBackend(tmp_path / "run", Transcript(tmp_path / "replayed"))
    assert ask_everything(replay) == recorded
    assert replay.order_matches == 0 and replay.recorded_backend == "rules"
    recorded_entries = Transcript(tmp_path / "run").entries()
    replayed_entries = Transcript(tmp_path / "replayed").entries()
    assert [e["parsed"] for e in replayed_entries] == [e["parsed"] for e in recorded_entries]


# -- attacks served by a model: refused by the check, or rejected when they run -------------------

STATIC_ATTACKS = {
    "import subprocess": "import subprocess\n\ndef skill(blocks):\n    subprocess.run(['true'])\n",
    "__import__": "def skill(blocks):\n    __import__('os').system('true')\n",
    "subclasses escape": "def skill(blocks):\n    ().__class__.__subclasses__()\n",
    "globals escape": "def skill(blocks):\n    skill.__globals__\n",
    "open a file": "def skill(blocks):\n    open('/tmp/gameon-pwned', 'w').write('x')\n",
    "eval": "def skill(blocks):\n    eval('1 + 1')\n",
}
RUNTIME_ATTACKS = {
    "endless loop": ("def skill(blocks):\n    while True:\n        pass\n", "CPU|more than 5 s"),
    "memory bomb": ("def skill(blocks):\n    x = [0] * (10 ** 10)\n", "memory|MemoryError"),
    "huge output": ("def skill(blocks):\n    while True:\n        print('x' * 1000)\n", "print"),
    "raises": ("def skill(blocks):\n    raise RuntimeError('boom')\n", "RuntimeError: boom"),
    "NaN action": ("def skill(blocks):\n    send_action([float('nan')] * 5)\n", "invalid action"),
    "wrong shape": ("def skill(blocks):\n    send_action([0.0, 0.0])\n", "invalid action"),
}


@pytest.mark.parametrize("attack", sorted(STATIC_ATTACKS))
def test_a_served_source_the_check_refuses_never_runs(
    attack: str, provider: Provider, tmp_path: Path
) -> None:
    provider.server.script(*[provider.reply(code_answer(STATIC_ATTACKS[attack]))] * 3)
    with pytest.raises(VLMError, match="sandbox rejected"):
        modules.write_skill_code(
            provider.backend(tmp_path), default_library().get("lift"), API_REFERENCE
        )
    assert not Path("/tmp/gameon-pwned").exists()


@pytest.mark.parametrize("attack", sorted(RUNTIME_ATTACKS))
def test_a_served_source_that_misbehaves_when_run_is_a_logged_failure(
    attack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gameon.experimenter.embodiment import Embodiment
    from gameon.experimenter.skills import CodedExecutor

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    provider = Provider("openai")
    source, reason = RUNTIME_ATTACKS[attack]
    provider.server.script(provider.reply(code_answer(source)))
    try:
        answer = modules.write_skill_code(
            provider.backend(tmp_path), default_library().get("lift"), API_REFERENCE
        )
    finally:
        provider.server.close()
    executor = CodedExecutor(answer.source)
    library = default_library()
    library.replace_executor("lift", executor)
    with Embodiment("GameOn/Lift-v0", library, skill_budget={"lift": 20}) as embodiment:
        record = embodiment.execute("pick up the red block", seed=0)
    assert not record.success and record.steps == 20  # the episode went on to its budget
    (rejection,) = executor.rejections
    assert re.search(reason, rejection), rejection


# -- verification in the collect loop ------------------------------------------------------------


class CodeLift:
    """The two agents of a vlm curriculum: lift is to be coded, with its reference source."""

    def __init__(self) -> None:
        self.failures: list[tuple[str, str]] = []

    def decide_code_or_learn(self, coded: dict[str, float]) -> list[modules.SkillDecision]:
        return [modules.SkillDecision(skill="lift", decision="code", reason="low")]

    def write_code(self, skill: str) -> modules.CodedSkillAnswer:
        return modules.CodedSkillAnswer(source=TEMPLATES[skill], rationale="reference")

    def record_code_failure(self, skill: str, reason: str) -> None:
        self.failures.append((skill, reason))


class NoTrials:
    """An embodiment whose practice env has no lift task, so no trial can run."""

    def __init__(self) -> None:
        self.library = default_library()

    @contextlib.contextmanager
    def library_plans(self) -> Iterator[None]:
        yield

    def execute(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("there is no task to run")


def test_a_coded_skill_without_trials_never_joins_the_library() -> None:
    curriculum, embodiment = CodeLift(), NoTrials()
    report = code_skills(curriculum, embodiment, task_set("GameOn/Stack-v0"), [1, 2, 3], 0.8)
    (coded,) = report["coded"]
    assert coded["added"] is False and coded["verification"]["trials"] == 0
    assert embodiment.library.get("lift").executor.kind != "coded"
    reason = "not verified: no tasks of this skill in the practice env"
    assert coded["reason"] == reason and curriculum.failures == [("lift", reason)]


class NoAgents(CodeLift):
    """A curriculum whose agents must not be asked."""

    def decide_code_or_learn(self, coded: dict[str, float]) -> list[modules.SkillDecision]:
        raise AssertionError("the slow agent was asked on a machine without a sandbox")


def test_coding_without_a_sandbox_stops_before_the_model_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither bwrap nor unshare
    tasks = task_set("GameOn/Lift-v0")
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        code_skills(NoAgents(), NoTrials(), tasks, [1, 2, 3], 0.8)
