"""The curriculum registry: every curriculum by name, and curricula built for an env.

`make_curriculum` builds any curriculum by name, `curriculum_for_env` one over an env's tasks
(each curriculum takes what it reads of the env and of the caller's settings through its
`setup_options`), and `check_curriculum_settings` refuses a run setting that only another
curriculum reads. A new curriculum is one class plus one line in `_REGISTRY`. This module sees
every curriculum, those of `curriculum.py` and the `vlm` one of `vlm_curriculum.py`, so that
neither of those two modules imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gameon.envs import ENV_SKILLS
from gameon.experimenter.curriculum import (
    Curriculum,
    CurriculumSetup,
    FixedCurriculum,
    HandCurriculum,
    LearningProgressCurriculum,
    NegativeControl,
    PositiveControl,
    task_set,
)
from gameon.experimenter.vlm_curriculum import BackendSettingError, VLMCurriculum

_REGISTRY: dict[str, type[Curriculum]] = {
    curriculum.name: curriculum
    for curriculum in (
        FixedCurriculum,
        HandCurriculum,
        LearningProgressCurriculum,
        VLMCurriculum,
        PositiveControl,
        NegativeControl,
    )
}
CURRICULA = tuple(_REGISTRY)
ONLINE_CURRICULA = tuple(
    name for name, curriculum in _REGISTRY.items() if not curriculum.practises_off_target
)
"""The curricula an online learner (ppo, sac) trains with: it practises on the env it is
evaluated on, where a curriculum that practises only what its target does not need (the
negative control) has no task."""


def curriculum_class(name: str) -> type[Curriculum]:
    """The curriculum class registered as `name`; ValueError naming the accepted ones."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown curriculum {name!r}; accepted: {', '.join(CURRICULA)}")
    return _REGISTRY[name]


def make_curriculum(
    name: str,
    tasks: Sequence[str] | None = None,
    seed: int | None = 0,
    *,
    budget: int | None = None,
    target_skills: Sequence[str] | str | None = None,
    **options: Any,
) -> Curriculum:
    """Build a curriculum by name: fixed | hand | lp | vlm | positive_control | negative_control.

    All but hand need `tasks`. hand reads `path` (default: the shipped TOML) for a scene of
    `colours` (default 3 blocks); when `tasks` is given, every stage task must be among them;
    `budget` (the outcomes the run will report) sizes the stages that give `window_share`. The
    controls need `target_skills` (e.g. ("tower",)); positive_control takes `mastery`. Curricula
    that read neither ignore `budget` and `target_skills`. `options` go to the curriculum's
    constructor (lp: fast, slow, explore, group); vlm takes them as `make_vlm_curriculum` does
    (backend name or instance, model, base_url, transcript, replay_path, interval,
    proposal_size, group, ...).
    """
    return curriculum_class(name).build(
        tasks, seed, budget=budget, target_skills=target_skills, **options
    )


def check_curriculum_settings(
    name: str, settings: Mapping[str, Any], accepted: Sequence[str] = CURRICULA
) -> None:
    """Refuse a curriculum outside `accepted` (the caller's curricula: every one, or
    `ONLINE_CURRICULA` for an online learner), listing them, then the first of `settings` that
    is given (neither None nor False) but read only by other curricula than `name`, naming them
    (e.g. vlm_model for lp)."""
    if name not in accepted:
        listed = ", ".join(accepted)
        if name in _REGISTRY:
            raise ValueError(f"curriculum {name!r} cannot train here; accepted: {listed}")
        raise ValueError(f"unknown curriculum {name!r}; accepted: {listed}")
    reads = curriculum_class(name).settings
    for setting, value in settings.items():
        if value is None or value is False or setting in reads:
            continue
        readers = " or ".join(c.name for c in _REGISTRY.values() if setting in c.settings)
        raise ValueError(f"{setting} is only read by the {readers} curriculum, not {name!r}")


def curriculum_for_env(
    env_id: str,
    name: str,
    seed: int,
    hand_path: str | Path | None = None,
    targets_only: bool = False,
    vlm_options: Mapping[str, Any] | None = None,
    budget: int | None = None,
    target_skills: Sequence[str] | None = None,
    group: str | None = None,
) -> Curriculum:
    """A curriculum over an env's tasks; a ValueError says why it cannot train there.

    Each curriculum reads what it needs of the env and of these settings (`setup_options`) and
    ignores the rest: `hand_path` (hand's stages file), `vlm_options` (the vlm curriculum's, see
    `make_vlm_curriculum`; its scene camera defaults to the env's front camera), `group` (how lp
    and the vlm's background lp keep learning progress, task | skill; None: task). `budget`: the
    outcomes the run will report to the curriculum (hand sizes its `window_share` stages with
    it). `target_skills`: what the controls aim at (None: the env's own target skills,
    `ENV_SKILLS[env_id][0]`; the collect loop passes its target env's).
    """
    import gymnasium as gym

    import gameon.envs  # noqa: F401  (registers the ids)

    curriculum = curriculum_class(name)  # an unknown name is refused as such, before the probe
    probe = gym.make(env_id)
    skills, colours = probe.unwrapped.skills, probe.unwrapped.colours
    probe.close()
    if targets_only:
        skills = ENV_SKILLS[env_id][0]
    tasks = task_set(skills, colours)
    setup = CurriculumSetup(env_id, colours, hand_path, vlm_options, group)
    options = curriculum.setup_options(setup)
    if target_skills is None:
        target_skills = ENV_SKILLS[env_id][0]
    try:
        return make_curriculum(
            name, tasks, seed, budget=budget, target_skills=target_skills, **options
        )
    except BackendSettingError:
        raise
    except ValueError as error:
        goal = _training_goal(env_id, target_skills)
        raise ValueError(f"curriculum {name!r} cannot train {goal}: {error}") from None


def _training_goal(env_id: str, target_skills: Sequence[str]) -> str:
    """What a curriculum was asked to train, as its errors name it: "on GameOn/Reach-v0", or
    "for GameOn/Tower-v0 (practising on GameOn/MultiSkill-v0)" when the target is another env's."""
    if tuple(target_skills) == tuple(ENV_SKILLS[env_id][0]):
        return f"on {env_id}"
    target = next(
        (
            other
            for other, (skills, _) in ENV_SKILLS.items()
            if tuple(skills) == tuple(target_skills)
        ),
        f"the target skills {', '.join(target_skills)}",
    )
    return f"for {target} (practising on {env_id})"
