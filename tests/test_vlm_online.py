"""PPO and SAC under the vlm curriculum: consulted every N episodes, usage in the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from test_online_curriculum import ppo_args, sac_args  # noqa: E402

from gameon.baselines import ppo, sac  # noqa: E402
from gameon.experimenter.vlm import Transcript  # noqa: E402


@pytest.mark.parametrize(("module", "make_args"), [(ppo, ppo_args), (sac, sac_args)])
def test_online_learner_consults_the_rules_backend(
    tmp_path: Path, module: object, make_args: object, capsys: pytest.CaptureFixture
) -> None:
    args = make_args(tmp_path, curriculum="vlm", vlm_backend="rules", vlm_interval=4)
    summary = module.train(args)
    usage = summary["vlm"]
    calls = usage["calls"]  # the run's last line says what the model did
    said = f"vlm:      {calls} calls answered, {calls} answers used, 0 fallbacks to learning "
    assert said + "progress; 0 + 0 tokens, $0.00" in capsys.readouterr().out
    assert summary["curriculum_label"] == "vlm[rules]"
    assert usage["backend"] == "rules" and usage["fallbacks"] == 0
    episodes = summary["train_episodes"]
    proposed = episodes + args.num_envs  # the running episodes were proposed too
    assert usage["calls"] == -(-proposed // 4)  # one consultation per 4 episodes, rounded up
    entries = Transcript(tmp_path).entries()
    assert [e["module"] for e in entries] == ["propose"] * usage["calls"]
    assert all(e["images"] for e in entries)  # the front camera's view of the scene
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["vlm"] == usage
    assert summary["curriculum_state"]["source"] == "vlm"


def test_online_learner_without_vlm_reports_zero_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    summary = ppo.train(ppo_args(tmp_path, curriculum="lp"))
    assert summary["vlm"]["calls"] == 0 and summary["vlm"]["backend"] is None
    assert "vlm:" not in capsys.readouterr().out
    assert summary["curriculum_label"] == "lp"
