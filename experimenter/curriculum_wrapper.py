"""Wrappers through which a curriculum picks each episode's instruction and hears how it went.

- `CurriculumWrapper` wraps one env: every reset without `options["instruction"]` asks the
  curriculum, and the episode's end is reported with `update` exactly once.
- `CurriculumVectorWrapper` wraps a vector env (sync or async) whose autoreset is disabled. The
  curriculum stays in the training process: the wrapper proposes in the main process and hands
  each instruction to its sub-env through a masked `reset(options={"instruction": ...,
  "reset_mask": ...})`, which is the only channel into async worker processes.

Autoreset semantics of `CurriculumVectorWrapper.step` (Gymnasium's SAME_STEP mode, which the
wrapper advertises in `metadata["autoreset_mode"]`): on the step a sub-env's episode ends, its
reward, terminated and truncated are the final step's; its observation is the FIRST observation
of the next episode, already reset with a new proposal; `info["final_obs"][i]` and
`info["final_info"]` hold the last observation and info of the finished episode; the top-level
info entries of that sub-env are those of the new episode's reset (so `info["instruction"][i]`
is the new instruction). The next action is the new episode's first.

Episodes started with an explicit `options["instruction"]` are not the curriculum's and are not
reported; episodes cut short by a reset before they end are not reported either.
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv, VectorWrapper
from gymnasium.vector.utils import iterate

from gameon.envs.vector import make_vec
from gameon.experimenter.curriculum import Curriculum, Outcome


def _autoreset_mode(name: str) -> Any:
    """Return a gymnasium AutoresetMode member, explaining which gymnasium is needed if absent."""
    modes = getattr(gym.vector, "AutoresetMode", None)
    if modes is None or not hasattr(modes, name):
        raise RuntimeError(
            f"the curriculum vector wrapper needs gym.vector.AutoresetMode.{name} "
            f"(gymnasium >= 1.1); installed gymnasium is {gym.__version__}"
        )
    return getattr(modes, name)


def _single_info(infos: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Extract one sub-env's info dict from a vector env's batched info (masks `_key`)."""
    single = {}
    for key, value in infos.items():
        if key.startswith("_") and key[1:] in infos:
            continue
        mask = infos.get(f"_{key}")
        if mask is None or not mask[index]:
            continue
        if isinstance(value, Mapping):
            single[key] = _single_info(value, index)
            continue
        item = value[index]
        single[key] = item.item() if isinstance(item, np.generic) else item
    return single


class CurriculumWrapper(gym.Wrapper):
    """One env whose instructions come from a curriculum, each episode reported exactly once.

    Inside a sync vector env with its default autoreset this also works (one process, one
    curriculum); an async vector env would copy the curriculum into its workers, so use
    `CurriculumVectorWrapper` (or `make_curriculum_vec_env`) for vector envs.
    """

    def __init__(self, env: gym.Env, curriculum: Curriculum) -> None:
        super().__init__(env)
        self.curriculum = curriculum
        self.instruction: str | None = None
        self.episode_return = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        options = dict(options or {})
        if "instruction" in options:
            self.instruction = None
        else:
            self.instruction = self.curriculum.propose()
            options["instruction"] = self.instruction
        self.episode_return = 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return += float(reward)
        if (terminated or truncated) and self.instruction is not None:
            self.curriculum.update(self.instruction, bool(info["success"]), self.episode_return)
            self.instruction = None
        return observation, reward, terminated, truncated, info


class CurriculumVectorWrapper(VectorWrapper):
    """A vector env whose every episode is proposed by, and reported to, one curriculum.

    The wrapped vector env must have `autoreset_mode=AutoresetMode.DISABLED`; this wrapper resets
    finished sub-envs itself, in the same step, with fresh proposals (see the module docstring).
    """

    def __init__(self, env: VectorEnv, curriculum: Curriculum) -> None:
        super().__init__(env)
        disabled = _autoreset_mode("DISABLED")
        if env.metadata.get("autoreset_mode") != disabled:
            raise ValueError(
                "CurriculumVectorWrapper needs a vector env made with "
                "vector_kwargs={'autoreset_mode': gym.vector.AutoresetMode.DISABLED}, got "
                f"{env.metadata.get('autoreset_mode')}; make_curriculum_vec_env does this"
            )
        self.metadata = {**env.metadata, "autoreset_mode": _autoreset_mode("SAME_STEP")}
        self.curriculum = curriculum
        self.instructions: list[str | None] = [None] * self.num_envs
        """The proposal each sub-env is practising; None for an explicitly given instruction."""
        self.episode_returns = np.zeros(self.num_envs)

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every sub-env, each with its own proposal unless an instruction is given."""
        options = dict(options or {})
        if "reset_mask" in options:
            raise ValueError(
                "CurriculumVectorWrapper resets finished sub-envs itself; "
                "options['reset_mask'] is not accepted"
            )
        self.episode_returns[:] = 0.0
        if "instruction" in options:
            self.instructions = [None] * self.num_envs
            return self.env.reset(seed=seed, options=options)
        proposals = self.curriculum.propose_batch(self.num_envs)
        observations, infos = self.env.reset(
            seed=seed, options={**options, "instruction": proposals[0]}
        )
        self.instructions[0] = proposals[0]
        singles = [_single_info(infos, i) for i in range(self.num_envs)]
        for i in range(1, self.num_envs):
            observations, singles[i] = self._reset_one(i, proposals[i], options)
        return observations, self._batched(singles)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env; report finished episodes and restart them with new proposals."""
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        self.episode_returns += rewards
        ended = np.flatnonzero(np.logical_or(terminations, truncations))
        if len(ended) == 0:
            return observations, rewards, terminations, truncations, infos
        singles = [_single_info(infos, i) for i in range(self.num_envs)]
        final_observations = list(iterate(self.single_observation_space, observations))
        self._report(ended, singles)
        proposals = self.curriculum.propose_batch(len(ended))
        for i, proposal in zip(ended, proposals, strict=True):
            final = {"final_obs": deepcopy(final_observations[i]), "final_info": singles[i]}
            observations, reset_info = self._reset_one(int(i), proposal)
            singles[i] = {**final, **reset_info}
        return observations, rewards, terminations, truncations, self._batched(singles)

    def _report(self, ended: np.ndarray, singles: list[dict[str, Any]]) -> None:
        """Tell the curriculum how each finished episode it proposed went, once per episode."""
        outcomes = []
        for i in ended:
            instruction = self.instructions[i]
            if instruction is None:
                continue
            success = bool(singles[i]["success"])
            outcomes.append(Outcome(instruction, success, float(self.episode_returns[i])))
            self.instructions[i] = None
        self.curriculum.update_batch(outcomes)

    def _reset_one(
        self, index: int, instruction: str, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset one sub-env with an instruction; return the batched obs and its own info."""
        mask = np.zeros(self.num_envs, dtype=np.bool_)
        mask[index] = True
        reset_options = {**(options or {}), "instruction": instruction, "reset_mask": mask}
        observations, infos = self.env.reset(options=reset_options)
        self.instructions[index] = instruction
        self.episode_returns[index] = 0.0
        return observations, _single_info(infos, index)

    def _batched(self, singles: list[dict[str, Any]]) -> dict[str, Any]:
        """Batch per-sub-env info dicts the way Gymnasium vector envs do (values plus masks)."""
        infos: dict[str, Any] = {}
        for i, single in enumerate(singles):
            infos = self._add_info(infos, single, i)
        return infos


def make_curriculum_vec_env(
    env_id: str,
    num_envs: int,
    curriculum: Curriculum,
    vectorization_mode: str = "sync",
    vector_kwargs: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> CurriculumVectorWrapper:
    """Make `num_envs` copies of an env whose episodes one curriculum chooses, in a vector env
    of `vectorization_mode`: "shared" (`gameon.envs.make_vec`), or gymnasium's "sync" or "async".

    `env_kwargs` go to `gym.make` (e.g. `max_episode_steps`, `reward_mode`, and `wrappers`, a list
    applied to each env); `vector_kwargs` to the vector env (e.g. `context`), whose autoreset is
    always disabled.
    """
    vector_kwargs = {**(vector_kwargs or {}), "autoreset_mode": _autoreset_mode("DISABLED")}
    if vectorization_mode == "shared":
        env = make_vec(env_id, num_envs, vector_kwargs=vector_kwargs, **env_kwargs)
    else:
        env = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            vector_kwargs=vector_kwargs,
            **env_kwargs,
        )
    return CurriculumVectorWrapper(env, curriculum)
