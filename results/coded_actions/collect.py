"""Gather the comparison runs under results/coded_actions/: per-run figures, per-arm means, and
for coded runs the selections their final policy makes on the evaluation suite (a replay of the
final evaluation through CodedActions, which must reproduce eval.json's successes).

Run: MUJOCO_GL=egl python results/coded_actions/collect.py  (writes comparison.json beside it)
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np

from gameon.benchmark.evaluation import evaluation_suite
from gameon.experimenter.coded_actions import CodedActions, load_coded_skills
from gameon.policy import load_checkpoint, make_policy

HERE = Path(__file__).parent


def replay_selections(run_dir: Path) -> dict:
    """Run the final policy on the suite through CodedActions; count what it selects."""
    eval_record = json.loads((run_dir / "eval.json").read_text())
    actor, normalizer, payload = load_checkpoint(run_dir / "checkpoint.pt")
    policy = make_policy(actor, normalizer)
    args = payload["args"]
    env = CodedActions(
        gym.make(payload["env_id"], reward_mode=args["reward_mode"]),
        load_coded_skills(args["coded_skills"]),
        args["coded_max_steps"],
    )
    per_skill = len(eval_record["episodes"]) // len(eval_record["per_skill"])
    suite = evaluation_suite(payload["env_id"], per_skill)
    agent_steps, successes, selected_first = 0, [], Counter()
    for task in suite:
        observation, _ = env.reset(seed=task.seed, options={"instruction": task.instruction})
        done, first = False, True
        while not done:
            observation, _, terminated, truncated, info = env.step(policy(observation))
            agent_steps += 1
            if first:
                selected_first[info.get("coded_skill", "continuous")] += 1
                first = False
            done = terminated or truncated
        successes.append(bool(info["success"]))
    expected = [episode["success"] for episode in eval_record["episodes"]]
    return {
        "agent_steps_per_episode": agent_steps / len(suite),
        "selections": dict(env.selections),
        "rejections": dict(env.rejections),
        "first_choice": dict(selected_first),
        "reproduces_eval": successes == expected,
    }


def main() -> None:
    """Write comparison.json and print a markdown table of the runs."""
    logging.disable(logging.WARNING)
    runs = {}
    for path in sorted(HERE.glob("*/summary.json")):
        summary = json.loads(path.read_text())
        record = {
            "seed": summary["seed"],
            "global_step": summary["global_step"],
            "agent_steps": summary.get("coded_actions", {}).get("agent_steps"),
            "eval_success": summary["eval"]["success_rate"],
            "eval_episodes": len(summary["eval"]["episodes"]),
            "train_seconds": summary["train_seconds"],
            "eval_seconds": summary["eval_seconds"],
            "env_steps_per_s": summary["sps"],
            "train_episodes": summary["train_episodes"],
            "train_successes": sum(s["successes"] for s in summary["train_per_skill"].values()),
        }
        if "coded_actions" in summary:
            record["final_policy"] = replay_selections(path.parent)
        runs[path.parent.name] = record
    arms: dict[str, list[dict]] = {}
    for name, record in runs.items():
        arms.setdefault(name.rsplit("_s", 1)[0], []).append(record)
    means = {
        arm: {
            "seeds": [r["seed"] for r in records],
            "eval_success": [r["eval_success"] for r in records],
            "mean_eval_success": float(np.mean([r["eval_success"] for r in records])),
            "mean_train_seconds": float(np.mean([r["train_seconds"] for r in records])),
        }
        for arm, records in arms.items()
    }
    (HERE / "comparison.json").write_text(json.dumps({"runs": runs, "arms": means}, indent=1))
    print("| run | env steps | agent steps | train s | env steps/s | eval success |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in runs.items():
        agent = r["agent_steps"] if r["agent_steps"] is not None else r["global_step"]
        print(
            f"| {name} | {r['global_step']} | {agent} | {r['train_seconds']:.0f} | "
            f"{r['env_steps_per_s']:.0f} | {r['eval_success']:.0%} |"
        )
    for arm, m in means.items():
        print(arm, m)


if __name__ == "__main__":
    main()
