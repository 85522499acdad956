"""The benchmark matrix: a TOML spec of protocols, curricula, learners, env ids, seeds and budgets,
expanded into one `RunSpec` per run with a readable, deterministic run id.

A spec looks like this (the shipped presets live in `benchmark/presets/`):

    name = "smoke"
    seeds = [0]
    eval_episodes_per_skill = 1
    curricula = ["fixed", "hand", "lp", { name = "vlm", backend = "auto" }]

    [online]
    learners = ["ppo"]
    env_ids = ["GameOn/MultiSkill-v0"]
    budget = { total_timesteps = 256, eval_every = 128 }
    settings = { reward_mode = "dense" }          # Args fields shared by the learners
    ppo = { num_steps = 64, num_minibatches = 4 } # Args fields of one learner

    [collect]
    learners = ["bc"]
    env_ids = ["GameOn/Tower-v0"]
    budget = { iterations = 1, episodes_per_iteration = 2, seed_episodes = 4, num_updates = 200 }

A protocol section may override `seeds` and `curricula`; `[[online]]` (an array of tables) gives a
protocol several sections, e.g. one per group of envs. Runs are the product, per section, of env
id x curriculum x learner x seed, ids like "collect__Tower__vlm-rules__bc__s0". The `vlm`
curriculum's backend "auto" resolves here, once, to "gemini" when GEMINI_API_KEY or
GOOGLE_API_KEY is set and to "rules" otherwise. Its `max_cost` option, e.g.
`{ name = "vlm", backend = "auto", max_cost = 0.5 }`, caps each collect run's estimated VLM spend
in USD (LoopConfig.vlm_max_cost): past it the curriculum falls back without asking the model.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gameon.envs import ENV_IDS
from gameon.experimenter.curriculum import CURRICULA

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PRESETS_DIR = Path(__file__).with_name("presets")
PRESETS = ("smoke", "paper", "controls", "full")
DEFAULT_PRESET = "smoke"
PROTOCOLS = ("online", "collect")
LEARNERS = {"online": ("ppo", "sac"), "collect": ("bc", "iql")}
BUDGET_KEYS = {
    "online": ("total_timesteps", "eval_every", "num_envs"),
    "collect": ("iterations", "episodes_per_iteration", "seed_episodes", "num_updates"),
}
REQUIRED_BUDGET = {"online": ("total_timesteps",), "collect": ()}
VLM_BACKENDS = ("auto", "rules", "gemini", "openai", "replay")
KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
TOP_KEYS = ("name", "description", "seeds", "eval_episodes_per_skill", "curricula", *PROTOCOLS)
SECTION_KEYS = ("learners", "env_ids", "budget", "settings", "seeds", "curricula")
OWNED_FIELDS = {
    "online": ("env_id", "seed", "run_dir", "curriculum", "eval_episodes_per_skill", "track"),
    "collect": ("env_id", "curriculum", "learner", "seed", "eval_episodes_per_skill"),
}
"""Fields of the learner's Args (online) or LoopConfig (collect) that the harness sets itself."""
OPTION_ALIASES = {("hand", "path"): "hand_curriculum"}
"""Curriculum options whose config field is not named `{curriculum}_{option}`."""


@dataclass(frozen=True)
class CurriculumSpec:
    """A curriculum of the matrix and its options, e.g. vlm with backend "rules"."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """The run id part: the name, then the option values, e.g. "vlm-rules"."""
        values = [_slug_value(self.options[key]) for key in sorted(self.options)]
        return "-".join([self.name, *values])

    @property
    def label(self) -> str:
        """How results are labelled: "vlm[rules]" for the VLM curriculum, else the slug."""
        if self.name == "vlm":
            return f"vlm[{self.options.get('backend', 'rules')}]"
        return self.slug

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.options}


@dataclass(frozen=True)
class ProtocolSpec:
    """One protocol's part of the matrix: its learners, envs, budget and settings."""

    protocol: str
    learners: tuple[str, ...]
    env_ids: tuple[str, ...]
    seeds: tuple[int, ...]
    curricula: tuple[CurriculumSpec, ...]
    eval_episodes_per_skill: int
    budget: dict[str, int]
    settings: dict[str, Any] = field(default_factory=dict)
    learner_settings: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class MatrixSpec:
    """A parsed matrix spec; `expand` turns it into runs."""

    name: str
    description: str
    protocols: tuple[ProtocolSpec, ...]
    notes: tuple[str, ...] = ()
    """what parsing decided that a user should hear, e.g. which VLM backend "auto" chose"""


@dataclass(frozen=True)
class RunSpec:
    """One run of the matrix: everything `benchmark.runs.execute` needs."""

    run_id: str
    protocol: str
    curriculum: CurriculumSpec
    learner: str
    env_id: str
    seed: int
    eval_episodes_per_skill: int
    budget: dict[str, int]
    settings: dict[str, Any]
    """further Args (online) or LoopConfig (collect) fields, e.g. reward_mode"""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (run.json, matrix.json)."""
        data = dataclasses.asdict(self)
        data["curriculum"] = self.curriculum.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Inverse of `to_dict`."""
        curriculum = dict(data["curriculum"])
        name = curriculum.pop("name")
        return cls(**{**data, "curriculum": CurriculumSpec(name, curriculum)})


# -- parsing ----------------------------------------------------------------------------------


def load_spec(spec: str | Path | None = None, check: bool = True) -> MatrixSpec:
    """Parse a preset name (smoke, paper, controls, full) or a TOML path; None: the default preset.

    With `check`, every distinct configuration is also validated by the learner or loop that
    will run it (unknown settings, a curriculum that cannot train on an env), which imports torch.
    """
    path = spec_path(spec)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path} is not valid TOML: {error}") from None
    matrix = parse_spec(data, default_name=path.stem)
    if check:
        check_spec(matrix)
    return matrix


def spec_path(spec: str | Path | None) -> Path:
    """The TOML file of a preset name or a path; ValueError naming the presets if neither."""
    if spec is None:
        spec = DEFAULT_PRESET
    if str(spec) in PRESETS:
        return PRESETS_DIR / f"{spec}.toml"
    path = Path(spec)
    if path.is_file():
        return path
    raise ValueError(
        f"no matrix spec {str(spec)!r}: give a preset ({', '.join(PRESETS)}) or a TOML file path"
    )


def parse_spec(data: dict[str, Any], default_name: str = "matrix") -> MatrixSpec:
    """Build a MatrixSpec from parsed TOML; ValueError names the bad key and accepted values."""
    _check_keys(data, TOP_KEYS, "the matrix spec")
    present = [p for p in PROTOCOLS if p in data]
    if not present:
        raise ValueError("the matrix spec has no protocol section; add [online] and/or [collect]")
    notes: list[str] = []
    defaults = {
        "seeds": _seeds(data.get("seeds", [0]), "seeds"),
        "curricula": _curricula(data.get("curricula", list(CURRICULA[:3])), "curricula", notes),
        "eval_episodes_per_skill": _positive(
            data.get("eval_episodes_per_skill", 10), "eval_episodes_per_skill"
        ),
    }
    protocols = tuple(
        _protocol(
            p,
            section,
            defaults,
            notes,
            f"[{p}]" if isinstance(data[p], dict) else f"[[{p}]] #{i + 1}",
        )
        for p in present
        for i, section in enumerate(data[p] if isinstance(data[p], list) else [data[p]])
    )
    name = data.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"name must be letters, digits, '_', '.' or '-', got {name!r}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"description must be a string, got {description!r}")
    return MatrixSpec(name, description, protocols, tuple(dict.fromkeys(notes)))


def _protocol(
    protocol: str, section: Any, defaults: dict[str, Any], notes: list[str], where: str
) -> ProtocolSpec:
    if not isinstance(section, dict):
        raise ValueError(f"{where} must be a table (or [[{protocol}]] tables)")
    learners_allowed = LEARNERS[protocol]
    _check_keys(section, (*SECTION_KEYS, *learners_allowed), where)
    learners = _names(section.get("learners"), f"{where} learners", learners_allowed)
    env_ids = _names(section.get("env_ids"), f"{where} env_ids", ENV_IDS)
    budget = section.get("budget", {})
    if not isinstance(budget, dict):
        raise ValueError(f"{where} budget must be a table of {', '.join(BUDGET_KEYS[protocol])}")
    _check_keys(budget, BUDGET_KEYS[protocol], f"{where} budget")
    for key in REQUIRED_BUDGET[protocol]:
        if key not in budget:
            raise ValueError(f"{where} budget needs {key}")
    for key, value in budget.items():
        minimum = 0 if key in ("eval_every", "iterations") else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{where} budget {key} must be an integer >= {minimum}, got {value!r}")
    settings = _table(section.get("settings", {}), f"{where} settings")
    learner_settings = {}
    for learner in learners_allowed:
        if learner in section:
            if learner not in learners:
                raise ValueError(f"{where} has settings for {learner} but learners omit it")
            learner_settings[learner] = _table(section[learner], f"{where} {learner}")
    for table, where_table in [(settings, "settings")] + [
        (t, learner) for learner, t in learner_settings.items()
    ]:
        clash = [k for k in table if k in OWNED_FIELDS[protocol] or k in BUDGET_KEYS[protocol]]
        if clash:
            raise ValueError(
                f"{where} {where_table} may not set {', '.join(clash)}: the harness sets "
                f"{', '.join(OWNED_FIELDS[protocol])} and the budget table holds "
                f"{', '.join(BUDGET_KEYS[protocol])}"
            )
    part = ProtocolSpec(
        protocol=protocol,
        learners=learners,
        env_ids=env_ids,
        seeds=_seeds(section["seeds"], f"{where} seeds")
        if "seeds" in section
        else defaults["seeds"],
        curricula=(
            _curricula(section["curricula"], f"{where} curricula", notes)
            if "curricula" in section
            else defaults["curricula"]
        ),
        eval_episodes_per_skill=defaults["eval_episodes_per_skill"],
        budget=dict(budget),
        settings=settings,
        learner_settings=learner_settings,
    )
    if protocol == "online":
        _check_no_cap(part.curricula, where)
    return part


def _check_no_cap(curricula: tuple[CurriculumSpec, ...], where: str) -> None:
    """ValueError if an online section's vlm curriculum has a spending cap (ppo/sac have none)."""
    for curriculum in curricula:
        if "max_cost" in curriculum.options:
            raise ValueError(
                f"{where}: the vlm option max_cost (spending cap) applies to collect runs only; "
                "ppo and sac have no cap yet: give [online] its own curricula without max_cost"
            )


def _check_keys(table: dict[str, Any], accepted: tuple[str, ...], where: str) -> None:
    unknown = [k for k in table if k not in accepted]
    if unknown:
        raise ValueError(
            f"unknown key {unknown[0]!r} in {where}; accepted keys: {', '.join(accepted)}"
        )


def _names(value: Any, where: str, accepted: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a non-empty list of: {', '.join(accepted)}")
    for name in value:
        if name not in accepted:
            raise ValueError(
                f"unknown {where.split()[-1][:-1]} {name!r} in {where}; accepted: "
                f"{', '.join(accepted)}"
            )
    if len(set(value)) != len(value):
        raise ValueError(f"{where} lists a name twice: {value}")
    return tuple(value)


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    valid = isinstance(value, list) and value
    if not valid or not all(isinstance(s, int) and not isinstance(s, bool) for s in value):
        raise ValueError(f"{where} must be a non-empty list of integers, e.g. [0, 1, 2]")
    if len(set(value)) != len(value):
        raise ValueError(f"{where} lists a seed twice: {value}")
    return tuple(value)


def _positive(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{where} must be an integer >= 1, got {value!r}")
    return value


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a table of config fields, got {value!r}")
    return dict(value)


def _curricula(value: Any, where: str, notes: list[str]) -> tuple[CurriculumSpec, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(
            f"{where} must be a non-empty list of names ({', '.join(CURRICULA)}) or tables "
            'like { name = "vlm", backend = "rules" }'
        )
    curricula = tuple(_curriculum(item, where, notes) for item in value)
    slugs = [c.slug for c in curricula]
    if len(set(slugs)) != len(slugs):
        raise ValueError(f"{where} lists the same curriculum twice: {', '.join(slugs)}")
    return curricula


def _curriculum(item: Any, where: str, notes: list[str]) -> CurriculumSpec:
    if isinstance(item, str):
        item = {"name": item}
    if not isinstance(item, dict) or "name" not in item:
        raise ValueError(f"each of {where} must be a name or a table with a name, got {item!r}")
    options = {k: v for k, v in item.items() if k != "name"}
    name = item["name"]
    if name not in CURRICULA:
        raise ValueError(
            f"unknown curriculum {name!r} in {where}; accepted: {', '.join(CURRICULA)}"
        )
    for key, value in options.items():
        if not isinstance(value, (str, int, float, bool)):
            raise ValueError(f"curriculum {name} option {key} must be a plain value, got {value!r}")
    if name == "vlm":
        backend = options.get("backend", "auto")
        if backend not in VLM_BACKENDS:
            raise ValueError(
                f"unknown vlm backend {backend!r} in {where}; accepted: {', '.join(VLM_BACKENDS)}"
            )
        if backend == "auto":
            backend, reason = resolve_vlm_backend()
            notes.append(f"vlm backend auto -> {backend}: {reason}")
        options["backend"] = backend
        cap = options.get("max_cost")
        if "max_cost" in options and (isinstance(cap, bool | str) or not cap > 0):
            raise ValueError(
                f"vlm option max_cost in {where} is the spending cap of each run in USD, a "
                f"number > 0, e.g. max_cost = 0.5; got {cap!r}"
            )
    return CurriculumSpec(name, options)


def resolve_vlm_backend() -> tuple[str, str]:
    """What backend "auto" means here and why: gemini with a Gemini key, else rules."""
    for variable in KEY_VARIABLES:
        if os.environ.get(variable):
            return "gemini", f"{variable} is set"
    return "rules", f"neither {' nor '.join(KEY_VARIABLES)} is set (results labelled vlm[rules])"


def _slug_value(value: Any) -> str:
    text = str(value)
    if "/" in text or text.endswith(".toml"):
        text = Path(text).stem
    return re.sub(r"[^A-Za-z0-9.]+", "_", text)


# -- expansion --------------------------------------------------------------------------------


def env_slug(env_id: str) -> str:
    """The run id part of an env id: "GameOn/Tower-v0" -> "Tower" (other versions keep -vN)."""
    name = env_id.split("/")[-1]
    return name.removesuffix("-v0")


def run_id(protocol: str, env_id: str, curriculum: CurriculumSpec, learner: str, seed: int) -> str:
    """The readable id of a run, e.g. "collect__Tower__vlm-rules__bc__s0"."""
    return f"{protocol}__{env_slug(env_id)}__{curriculum.slug}__{learner}__s{seed}"


def expand(spec: MatrixSpec) -> list[RunSpec]:
    """Every run of the matrix, in a fixed order: protocol, env, curriculum, learner, seed."""
    runs = []
    for part in spec.protocols:
        for env_id in part.env_ids:
            for curriculum in part.curricula:
                for learner in part.learners:
                    for seed in part.seeds:
                        settings = {**part.settings, **part.learner_settings.get(learner, {})}
                        runs.append(
                            RunSpec(
                                run_id=run_id(part.protocol, env_id, curriculum, learner, seed),
                                protocol=part.protocol,
                                curriculum=curriculum,
                                learner=learner,
                                env_id=env_id,
                                seed=seed,
                                eval_episodes_per_skill=part.eval_episodes_per_skill,
                                budget=dict(part.budget),
                                settings=settings,
                            )
                        )
    ids = [r.run_id for r in runs]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"the matrix gives two runs the same id: {', '.join(duplicated)}")
    return runs


def spec_dict(spec: MatrixSpec) -> dict[str, Any]:
    """The expanded matrix as JSON-ready data (what matrix.json holds)."""
    return {
        "format": "gameon-matrix-v1",
        "name": spec.name,
        "description": spec.description,
        "runs": [run.to_dict() for run in expand(spec)],
    }


# -- configs the runs will use ----------------------------------------------------------------


def config_class(protocol: str, learner: str) -> type:
    """The dataclass a run's settings fill: the learner's Args (online) or LoopConfig (collect)."""
    if protocol == "online":
        return importlib.import_module(f"gameon.baselines.{learner}").Args
    from gameon.experimenter.loop import LoopConfig

    return LoopConfig


def curriculum_fields(run: RunSpec, fields: set[str]) -> dict[str, Any]:
    """Map the curriculum's options onto config fields, e.g. vlm backend -> vlm_backend."""
    mapped = {}
    for key, value in run.curriculum.options.items():
        alias = OPTION_ALIASES.get((run.curriculum.name, key))
        candidates = [alias] if alias else [f"{run.curriculum.name}_{key}", f"curriculum_{key}"]
        target = next((c for c in candidates if c in fields), None)
        if target is None:
            raise ValueError(
                f"curriculum {run.curriculum.name} option {key!r} has no {run.protocol} setting "
                f"(looked for {', '.join(candidates)}) in {run.learner}'s config"
            )
        mapped[target] = value
    return mapped


def run_config(run: RunSpec, run_dir: Path | None = None) -> Any:
    """The Args (online) or LoopConfig (collect) instance a run trains with."""
    cls = config_class(run.protocol, run.learner)
    names = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {
        "env_id": run.env_id,
        "seed": run.seed,
        "curriculum": run.curriculum.name,
        "eval_episodes_per_skill": run.eval_episodes_per_skill,
        **run.budget,
    }
    if run.protocol == "online":
        values |= {"torch_threads": 1, "run_dir": None if run_dir is None else str(run_dir)}
    else:
        values["learner"] = run.learner
    values |= curriculum_fields(run, names)
    unknown = [k for k in {**run.settings, **values} if k not in names]
    if unknown:
        raise ValueError(
            f"{run.run_id}: {', '.join(unknown)} is not a setting of {run.learner} "
            f"({cls.__module__}.{cls.__name__}); accepted: {', '.join(sorted(names))}"
        )
    values = {**run.settings, **values}
    if isinstance(values.get("hidden"), list):
        values["hidden"] = tuple(values["hidden"])
    return cls(**values)


def check_run(run: RunSpec) -> None:
    """Build and validate the config a run will use; ValueError says what is wrong."""
    config = run_config(run)
    if run.protocol == "collect":
        config.validate()
        return
    module = importlib.import_module(f"gameon.baselines.{run.learner}")
    module.check_args(config)
    module.make_training_curriculum(config)


def check_spec(spec: MatrixSpec) -> None:
    """Validate each distinct configuration of the matrix once (seeds aside)."""
    seen = set()
    for run in expand(spec):
        key = (run.protocol, run.env_id, run.curriculum.slug, run.learner)
        if key in seen:
            continue
        seen.add(key)
        try:
            check_run(run)
        except ValueError as error:
            raise ValueError(f"run {run.run_id}: {error}") from None
