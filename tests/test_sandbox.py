"""Coded skills in the sandbox: every attack and failure is a SkillRejected with a clear reason,
nothing outside the child is touched, and the API's templates succeed on the real envs."""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import pytest

import gameon.envs  # noqa: F401
from gameon.envs import controller, oracle, world
from gameon.experimenter import coded_api, sandbox
from gameon.experimenter.coded_api import API_REFERENCE, TEMPLATES, scene_message
from gameon.experimenter.sandbox import (
    SandboxedSkill,
    SandboxLimits,
    SkillRejected,
    check_source,
    child_command,
    child_env,
    namespace_command,
)

SCENE = {
    "tcp": [0.5, 0.0, 0.2],
    "hand_yaw": 0.0,
    "gripper": 0.08,
    "blocks": {"red": {"pos": [0.5, 0.1, 0.025], "yaw": 0.1, "size": 0.05, "grasped": False}},
}
FAST = SandboxLimits(cpu_seconds=1, step_wall_seconds=3, max_steps=50)
ENV_IDS = {
    "reach": "GameOn/Reach-v0",
    "lift": "GameOn/Lift-v0",
    "place": "GameOn/Place-v0",
    "stack": "GameOn/Stack-v0",
}
BUDGETS = {"reach": 60, "lift": 100, "place": 200, "stack": 200}
"""The embodiment's step budgets per skill (`embodiment.DEFAULT_BUDGETS`)."""


def tools() -> list[str]:
    """The namespace tools that work on this machine."""
    working = []
    for tool in ("bwrap", "unshare"):
        try:
            namespace_command(tool)
        except RuntimeError:
            continue
        working.append(tool)
    return working


def run(source: str, limits: SandboxLimits = FAST, steps: int = 100) -> list[list[float]]:
    """Run a skill against a fixed scene; its actions, and the child ended afterwards."""
    skill = SandboxedSkill(source, ["red"], limits)
    actions = []
    try:
        with skill:
            for _ in range(steps):
                action = skill.act(SCENE)
                if action is None:
                    break
                actions.append(action)
    finally:
        assert skill._process is None or skill._process.poll() is not None
    return actions


def rejected(source: str, limits: SandboxLimits = FAST) -> str:
    with pytest.raises(SkillRejected) as error:
        run(source, limits)
    reason = error.value.reason
    assert reason and "\n" not in reason
    return reason


ATTACKS = {
    "import os": ("import os\ndef skill(blocks):\n    os.system('touch {path}')\n", "import"),
    "import subprocess": (
        "def skill(blocks):\n    import subprocess\n    subprocess.run(['touch', '{path}'])\n",
        "import",
    ),
    "__import__": ("def skill(blocks):\n    __import__('os').system('touch {path}')\n", "'_'"),
    "subclasses": (
        "def skill(blocks):\n"
        "    for c in ().__class__.__base__.__subclasses__():\n"
        "        if c.__name__ == 'Popen':\n"
        "            c(['touch', '{path}'])\n",
        "'_'",
    ),
    "globals": (
        "def f():\n    pass\n"
        "def skill(blocks):\n    f.__globals__['__builtins__']['open']('{path}', 'w')\n",
        "'_'",
    ),
    "open": ("def skill(blocks):\n    open('{path}', 'w').write('x')\n", "'open'"),
    "exec": ("def skill(blocks):\n    exec(\"open('{path}', 'w')\")\n", "'exec'"),
    "eval": ("def skill(blocks):\n    eval(\"open('{path}', 'w')\")\n", "'eval'"),
    "getattr": ("def skill(blocks):\n    getattr(blocks, 'append')('{path}')\n", "'getattr'"),
    "str.format": ("def skill(blocks):\n    '{{0.__class__}}'.format('{path}')\n", "'format'"),
    "socket": (
        "import socket\ndef skill(blocks):\n    socket.create_connection(('127.0.0.1', 80))\n",
        "import",
    ),
    "frame": (
        "def g():\n    yield '{path}'\ndef skill(blocks):\n    g().gi_frame.f_globals\n",
        "yield",
    ),
    "class": ("class A:\n    pass\ndef skill(blocks):\n    A('{path}')\n", "class"),
    "global": ("X = '{path}'\ndef skill(blocks):\n    global X\n    X = 2\n", "global"),
}


@pytest.mark.parametrize("name", ATTACKS)
def test_attacks_are_rejected_and_touch_nothing(name: str, tmp_path: Path) -> None:
    template, words = ATTACKS[name]
    target = tmp_path / "pwned"
    reason = rejected(template.format(path=target))
    assert words in reason, reason
    assert not target.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("def skill(blocks):\n  return (\n", "syntax error"),
        ("def helper(blocks):\n    pass\n", "def skill(blocks)"),
        ("def skill():\n    pass\n", "one argument"),
        ("def skill(blocks, extra):\n    pass\n", "needs a default"),
        ("def skill(blocks, *, side):\n    pass\n", "needs a default"),
        ("x = 1\n" * 2000 + "def skill(blocks):\n    pass\n", "characters"),
        ("def skill(blocks):\n    with blocks:\n        pass\n", "with statements"),
        ("@wait\ndef skill(blocks):\n    pass\n", "decorators"),
        ("def skill(blocks):\n    x = [0]\n    x[0] += 1\n", "RestrictedPython"),
        ("def skill(blocks):\n    x = 1" + "+1" * 250 + "\n", "nested too deeply"),
        ("def skill(blocks):\n    x = " + "-" * 5900 + "1\n", "nested too deeply"),
    ],
)
def test_check_source_names_the_problem(source: str, words: str) -> None:
    with pytest.raises(SkillRejected, match=re.escape(words)):
        check_source(source)


def test_templates_and_reference_example_pass_the_checks() -> None:
    for source in [*TEMPLATES.values(), reference_example()]:
        check_source(source)


def test_endless_loop_hits_the_cpu_limit() -> None:
    reason = rejected("def skill(blocks):\n    while True:\n        pass\n")
    assert "CPU limit of 1 s" in reason


def test_endless_loop_at_the_top_level_hits_the_cpu_limit() -> None:
    reason = rejected("while True:\n    pass\ndef skill(blocks):\n    pass\n")
    assert "CPU limit" in reason


def test_slow_step_hits_the_wall_clock_limit() -> None:
    limits = SandboxLimits(cpu_seconds=10, step_wall_seconds=0.5)
    reason = rejected("def skill(blocks):\n    while True:\n        pass\n", limits)
    assert "more than 0.5 s to produce an action" in reason


def test_whole_skill_hits_the_wall_clock_limit() -> None:
    limits = SandboxLimits(cpu_seconds=10, wall_seconds=0.5)
    reason = rejected("def skill(blocks):\n    while True:\n        pass\n", limits)
    assert "wall-clock limit of 0.5 s" in reason


@pytest.mark.parametrize(
    "bomb",
    ["x = [0] * (10 ** 9)", "x = 'a' * (10 ** 9)", "x = [[0] * 1000 for i in range(10 ** 6)]"],
)
def test_memory_bomb_hits_the_memory_limit(bomb: str) -> None:
    reason = rejected(f"def skill(blocks):\n    {bomb}\n")
    assert "ran out of memory (limit 256 MB)" in reason


def test_huge_print_is_rejected_and_small_print_is_kept() -> None:
    reason = rejected("def skill(blocks):\n    while True:\n        print('spam' * 100)\n")
    assert "printed more than 4096 characters" in reason
    skill = SandboxedSkill("def skill(blocks):\n    print('holding', blocks)\n", ["red"], FAST)
    with skill:
        assert skill.act(SCENE) is None
    assert skill.printed == "holding ['red']\n"


def test_swallowed_print_overflow_is_still_rejected() -> None:
    source = (
        "def skill(blocks):\n"
        "    try:\n        print('x' * 5000)\n    except Exception:\n        pass\n"
        "    wait(3)\n"
    )
    assert "printed more than" in rejected(source)


def test_huge_message_is_rejected() -> None:
    reason = rejected("def skill(blocks):\n    send_action(['x' * 100000])\n")
    assert "message over the limit of 65536 bytes" in reason


def test_skill_that_raises_is_rejected_with_the_exception() -> None:
    reason = rejected("def skill(blocks):\n    return 1 / 0\n")
    assert reason == "the skill raised ZeroDivisionError: division by zero"
    reason = rejected("def skill(blocks):\n    scene().block('pink')\n")
    assert "KeyError" in reason and "pink" in reason


@pytest.mark.parametrize(
    ("action", "words"),
    [
        ("[float('nan'), 0, 0, 0, 0]", "nan is not a finite number"),
        ("[float('inf'), 0, 0, 0, 0]", "inf is not a finite number"),
        ("[2, 0, 0, 0, 0]", "2 is not a finite number in [-1, 1]"),
        ("[10 ** 400, 0, 0, 0, 0]", "is not a finite number in [-1, 1]"),
        ("[0, 0]", "got 2 entries"),
        ("[0, 0, 0, 0, 0, 0]", "got 6 entries"),
        ("['a', 0, 0, 0, 0]", "'a', not a number"),
        ("[True, 0, 0, 0, 0]", "True, not a number"),
        ("[[0], 0, 0, 0, 0]", "[0], not a number"),
        ("'abcde'", "got a str"),
    ],
)
def test_garbage_actions_are_rejected(action: str, words: str) -> None:
    reason = rejected(f"def skill(blocks):\n    send_action({action})\n")
    assert reason.startswith("invalid action") and words in reason, reason


def test_common_idioms_that_pass_the_check_also_run() -> None:
    """Each passed check_source and then failed at every run, on a name the skill never wrote
    (`_apply_`, a missing `flush`) or an exception class the child lacked."""
    source = (
        "def go(x, y, z, **options):\n    move_to(x, y, z, **options)\n"
        "def skill(blocks, verbose=False):\n"
        "    target = [0.5, 0.0, 0.2]\n"
        "    go(*target, tolerance=0.01)\n"
        "    print(*blocks, flush=True)\n"
        "    try:\n        scene().block('pink')\n"
        "    except (AttributeError, KeyError):\n        wait(1)\n"
        "    try:\n        raise NotImplementedError('later')\n"
        "    except NotImplementedError:\n        wait(1)\n"
    )
    check_source(source)
    assert run(source) == [[0.0, 0.0, 0.0, 0.0, -1.0]] * 2


def test_a_reason_with_a_lone_surrogate_can_be_encoded() -> None:
    """A skill raising `E('\\ud83d')` gave a reason that crashed the next prompt's encoding."""
    reason = rejected("def skill(blocks):\n    raise RuntimeError('no grip \\ud83d')\n")
    assert reason == "the skill raised RuntimeError: no grip \\ud83d"
    reason.encode("utf-8")
    skill = SandboxedSkill("def skill(blocks):\n    print('\\udc80')\n", ["red"], FAST)
    with skill:
        assert skill.act(SCENE) is None
    assert skill.printed == "\\udc80\n"


def test_too_many_actions_are_rejected() -> None:
    assert "more than 50 actions" in rejected("def skill(blocks):\n    wait(80)\n")


def test_api_misuse_is_rejected_with_the_reason() -> None:
    reason = rejected("move_to(0.5, 0.0, 0.2)\ndef skill(blocks):\n    pass\n")
    assert "failed to load" in reason and "only inside skill()" in reason
    reason = rejected("def skill(blocks):\n    move_to(float('nan'), 0, 0.2)\n")
    assert "x must be a finite number" in reason
    reason = rejected("def skill(blocks):\n    s = scene()\n    s.gripper = 1\n")
    assert "TypeError" in reason


def test_rejections_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gameon.sandbox"):
        rejected("import os\ndef skill(blocks):\n    pass\n")
    assert any("import statements" in r.getMessage() for r in caplog.records)


def test_skill_actions_and_done() -> None:
    source = "def skill(blocks):\n    wait(2)\n    send_action([0.5, -0.5, 0, 0, 1])\n"
    assert run(source) == [[0.0, 0.0, 0.0, 0.0, -1.0]] * 2 + [[0.5, -0.5, 0.0, 0.0, 1.0]]


def test_primitives_report_arrival() -> None:
    source = (
        "def skill(blocks):\n"
        "    print(move_to(0.5, 0.0, 0.203), rotate_to(0.3, max_steps=2))\n"
        "    print(move_to(0.5, 0.0, 0.5, speed=0.5, max_steps=1))\n"
    )
    skill = SandboxedSkill(source, ["red"], FAST)
    with skill:
        actions = [skill.act(SCENE) for _ in range(4)]
    assert actions == [[0.0, 0.0, 0.0, 1.0, -1.0]] * 2 + [[0.0, 0.0, 0.5, 0.0, -1.0], None]
    assert skill.printed == "True False\nFalse\n"


def test_gripper_command_starts_closed_on_a_held_block() -> None:
    held = {**SCENE, "blocks": {"red": {**SCENE["blocks"]["red"], "grasped": True}}}
    with SandboxedSkill("def skill(blocks):\n    wait(1)\n", ["red"], FAST) as skill:
        assert skill.act(held) == [0.0, 0.0, 0.0, 0.0, 1.0]


def test_primitives_keep_the_gripper_command_of_a_raw_action() -> None:
    source = "def skill(blocks):\n    send_action([0, 0, 0, 0, 1])\n    wait(1)\n"
    assert run(source) == [[0.0, 0.0, 0.0, 0.0, 1.0]] * 2  # wait keeps it closed, not open


def test_missing_namespace_tool_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        namespace_command()
    with pytest.raises(SkillRejected, match="apt-get install bubblewrap"):
        run("def skill(blocks):\n    pass\n")


def test_a_misspelt_sandbox_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMEON_SANDBOX", "bwarp")
    with pytest.raises(RuntimeError, match="GAMEON_SANDBOX='bwarp' names no sandbox tool"):
        namespace_command()
    with pytest.raises(SkillRejected, match="GAMEON_SANDBOX='bwarp'"):
        run("def skill(blocks):\n    pass\n")


def test_child_sees_no_api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-not-a-real-key-4242"
    monkeypatch.setenv("GEMINI_API_KEY", secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    envs = []
    popen = subprocess.Popen

    def spy(*args, **kwargs):
        envs.append(kwargs.get("env"))
        return popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    run("def skill(blocks):\n    wait(1)\n")
    assert envs and all(env is not None and secret not in env.values() for env in envs)


@pytest.mark.parametrize("tool", tools())
def test_namespace_hides_parent_environment(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-not-a-real-key-4242"
    monkeypatch.setenv("GEMINI_API_KEY", secret)
    probe = (
        "import os, sys\n"
        "found = [k for k, v in os.environ.items() if sys.argv[1] in v]\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
        "    except (OSError, ValueError):\n"
        "        continue\n"
        "    if sys.argv[1].encode() in data:\n"
        "        found.append(pid)\n"
        "print(found)\n"
    )
    command = [*namespace_command(tool), sys.executable, "-I", "-c", probe, secret]
    done = subprocess.run(command, capture_output=True, text=True, timeout=20, env=child_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("tool", tools())
def test_namespace_has_no_network(tool: str) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('connected')\n"
            "except OSError as error:\n"
            "    print('refused', error)\n"
        )
        command = [*namespace_command(tool), sys.executable, "-I", "-c", probe]
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, env=child_env())
    assert done.stdout.startswith("refused"), done.stdout + done.stderr


@pytest.mark.parametrize("tool", tools())
def test_namespace_holds_no_host_privileges(tool: str) -> None:
    probe = (
        "import os\n"
        "status = open('/proc/self/status').read().split('\\n')\n"
        "caps = [line.split()[1] for line in status if line.startswith('CapEff')]\n"
        "print(caps[0], os.readlink('/proc/self/ns/user'))\n"
    )
    command = [*namespace_command(tool), sys.executable, "-I", "-c", probe]
    done = subprocess.run(command, capture_output=True, text=True, timeout=20, env=child_env())
    caps, user_namespace = done.stdout.split()
    assert caps == "0000000000000000" or user_namespace != os.readlink("/proc/self/ns/user")


def test_bwrap_filesystem_is_read_only(tmp_path: Path) -> None:
    if "bwrap" not in tools():
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    outside = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        probe = (
            "import sys\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n"
            "        open(path, 'w').write('x')\n"
            "        print('wrote', path)\n"
            "    except OSError as error:\n"
            "        print('refused', type(error).__name__)\n"
        )
        targets = [str(outside / "pwned"), str(tmp_path / "pwned")]
        command = [*namespace_command("bwrap"), sys.executable, "-I", "-c", probe, *targets]
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, env=child_env())
        assert done.stdout.split("\n")[:2] == ["refused OSError", "refused FileNotFoundError"], (
            done.stdout + done.stderr
        )
        assert list(outside.iterdir()) == [] and list(tmp_path.iterdir()) == []
    finally:
        shutil.rmtree(outside)


def test_child_rlimits_are_set() -> None:
    probe = (
        "import resource, json, sys\n"
        "from gameon.experimenter import sandbox\n"
        "sandbox._set_limits(json.loads(sys.argv[1]))\n"
        "print([resource.getrlimit(getattr(resource, n))[0] for n in\n"
        "       ('RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', 'RLIMIT_NPROC')])\n"
    )
    limits = '{"cpu_seconds": 2.5, "memory_mb": 256}'
    command = [*namespace_command(), sys.executable, "-I", "-c", probe, limits]
    done = subprocess.run(command, capture_output=True, text=True, timeout=20, env=child_env())
    assert done.stdout.strip() == f"[3, {256 << 20}, 0, 16, 0]", done.stdout + done.stderr


def test_child_modules_import_only_the_standard_library() -> None:
    probe = (
        "import sys\n"
        "import gameon.experimenter.sandbox\n"
        "heavy = {'numpy', 'mujoco', 'torch', 'gymnasium', 'minari'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=20
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    assert child_command()[1:] == ["-I", "-m", "gameon.experimenter.sandbox"]


def test_api_constants_match_the_env() -> None:
    assert coded_api.MAX_SPEED == controller.MAX_SPEED
    assert coded_api.MAX_YAW_RATE == controller.MAX_YAW_RATE
    assert coded_api.YAW_LIMIT == controller.YAW_LIMIT
    assert coded_api.CONTROL_DT == world.CONTROL_DT
    assert tuple(world.WORKSPACE_LOW) == coded_api.WORKSPACE_LOW
    assert tuple(world.WORKSPACE_HIGH) == coded_api.WORKSPACE_HIGH
    assert sandbox.SandboxLimits().memory_mb == 256


def test_scene_message_matches_the_oracle_scene() -> None:
    env = gym.make("GameOn/Stack-v0")
    env.reset(seed=3)
    message = scene_message(env)
    scene = env.unwrapped.scene()
    view = coded_api.Scene.from_message(message)
    assert set(message) == {"tcp", "hand_yaw", "gripper", "blocks"}
    assert list(view.blocks) == list(scene.colours)
    assert view.tcp == tuple(scene.tcp_pos.tolist())
    assert view.gripper == pytest.approx(scene.gripper_opening)
    for i, colour in enumerate(scene.colours):
        block = view.block(colour)
        assert (block.x, block.y, block.z) == tuple(scene.block_pos[i].tolist())
        assert -math.pi / 4 <= block.yaw < math.pi / 4
        assert block.size == oracle.BLOCK_SIZE and block.grasped is False
    assert view.held() is None
    env.close()


def run_episode(env: gym.Env, source: str) -> bool:
    """Run a coded skill on the env's current episode within its skill's budget; success."""
    unwrapped = env.unwrapped
    instruction = unwrapped.instruction
    with SandboxedSkill(source, instruction.objects, relation=instruction.relation) as skill:
        for _ in range(BUDGETS[instruction.skill]):
            action = skill.act(scene_message(env))
            if action is None:
                break
            _, _, terminated, truncated, info = env.step(action)
            if info["success"] or terminated or truncated:
                break
    return oracle.success(instruction, unwrapped.scene(), unwrapped.start_scene)


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_succeeds_on_the_env(name: str) -> None:
    env = gym.make(ENV_IDS[name])
    wins = 0
    for seed in range(5):
        env.reset(seed=seed)
        wins += run_episode(env, TEMPLATES[name])
    env.close()
    assert wins >= 4, f"{name}: {wins}/5"


def reference_example() -> str:
    match = re.search(r"```python\n(.*?)```", API_REFERENCE, re.S)
    assert match is not None
    return match.group(1)


def test_reference_example_places_to_the_right() -> None:
    env = gym.make("GameOn/Place-v0")
    wins = 0
    for seed in range(3):
        text = "place the red block to the right of the blue block"
        env.reset(seed=seed, options={"instruction": text})
        wins += run_episode(env, reference_example())
    env.close()
    assert wins >= 2, f"{wins}/3"


def test_a_checkout_or_environment_under_tmp_stays_visible_under_bwraps_private_tmp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandbox.sys, "prefix", "/tmp/some-checkout/.venv")
    venv = "/tmp/some-checkout/.venv"
    binds = sandbox._tmp_binds()
    at = binds.index(venv)
    assert binds[at - 1 : at + 2] == ["--ro-bind", venv, venv]
    monkeypatch.setattr(sandbox.sys, "prefix", "/opt/venv")
    assert "/opt/venv" not in sandbox._tmp_binds()
