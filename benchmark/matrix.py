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
Two curricula of one protocol, learner and env must differ in their records' label
(`CurriculumSpec.label`), since reports and the leaderboard group runs by it: e.g. vlm with and
without `add_skills = false` are refused, vlm with two `model`s are two rows.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
)

from gameon.envs import ENV_IDS
from gameon.experimenter.curricula import CURRICULA
from gameon.experimenter.loop import LEARNERS as COLLECT_LEARNERS
from gameon.experimenter.vlm.factory import BACKENDS, FREE_BACKENDS, vlm_label
from gameon.integrity import INPUT_FILE_FIELDS, input_file_digests

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PRESETS_DIR = Path(__file__).with_name("presets")
PRESETS = ("smoke", "paper", "controls", "full")
DEFAULT_PRESET = "smoke"
PROTOCOLS = ("online", "collect")
LEARNERS = {"online": ("ppo", "sac"), "collect": COLLECT_LEARNERS}
VLM_BACKENDS = ("auto", *BACKENDS)
KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
OWNED_FIELDS = {
    "online": (
        "env_id",
        "seed",
        "run_dir",
        "curriculum",
        "eval_episodes_per_skill",
        "track",
        "torch_threads",
    ),
    "collect": ("env_id", "curriculum", "learner", "seed", "eval_episodes_per_skill"),
}
"""Fields of the learner's Args (online) or LoopConfig (collect) that the harness sets itself."""
PATH_OPTIONS = ("path", "replay", *INPUT_FILE_FIELDS)
"""Curriculum options and settings that name a file: compared resolved, so that two files of one
name in two folders are told apart."""
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
        values = [_slug_value(key, self.options[key]) for key in sorted(self.options)]
        return "-".join([self.name, *values])

    @property
    def label(self) -> str:
        """The `curriculum_label` of its runs' records, by which reports and the leaderboard
        group them: the name, or for vlm its backend and model (e.g. "vlm[rules]")."""
        if self.name == "vlm":
            return vlm_label(self.options.get("backend", "rules"), self.options.get("model"))
        return self.name

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


# -- the schema -------------------------------------------------------------------------------
# A field's description says what it accepts: `_explain` quotes it when a spec gets it wrong.

STRICT = ConfigDict(extra="forbid", strict=True)
Count = Annotated[int | None, Field(ge=1, description="an integer >= 1")]
CountFromZero = Annotated[int | None, Field(ge=0, description="an integer >= 0")]
Table = Annotated[dict[str, Any], Field(description="a table of config fields")]
PLAIN_VALUE = "a plain value (a string, number or boolean)"  # a curriculum option's


class OnlineBudget(BaseModel):
    model_config = STRICT
    total_timesteps: Count
    eval_every: CountFromZero = None
    num_envs: Count = None


class CollectBudget(BaseModel):
    model_config = STRICT
    iterations: CountFromZero = None
    episodes_per_iteration: Count = None
    seed_episodes: Count = None
    num_updates: Count = None


BUDGETS = {"online": OnlineBudget, "collect": CollectBudget}
BUDGET_KEYS = {protocol: tuple(budget.model_fields) for protocol, budget in BUDGETS.items()}


def _distinct(values: list[Any]) -> list[Any]:
    if repeated := [value for i, value in enumerate(values) if value in values[:i]]:
        raise ValueError(f"lists {repeated[0]!r} twice")
    return values


def _list_of(item: Any, says: str) -> Any:
    """A non-empty list of distinct items."""
    return Annotated[list[item], Field(min_length=1, description=says), AfterValidator(_distinct)]


def _names(accepted: tuple[str, ...]) -> Any:
    return _list_of(Literal[accepted], f"a non-empty list of: {', '.join(accepted)}")


class CurriculumTable(BaseModel):
    """A curriculum's name and its options (`curriculum_fields` maps them to config fields)."""

    model_config = ConfigDict(extra="allow", strict=True)
    __pydantic_extra__: dict[str, str | int | float | bool]


class VlmTable(CurriculumTable):
    name: Literal["vlm"]
    backend: Literal[VLM_BACKENDS] = Field("auto", description=f"one of: {', '.join(VLM_BACKENDS)}")
    max_cost: Annotated[int | float | None, Field(gt=0)] = Field(
        None, description="the spending cap of each run in USD, a number > 0, e.g. max_cost = 0.5"
    )


class OtherTable(CurriculumTable):
    name: Literal[tuple(name for name in CURRICULA if name != "vlm")]


MAX_SEED = 2**32 - 1
"""The largest seed every learner accepts (numpy's legacy seeding takes 0 to 2**32 - 1)."""
Seeds = _list_of(
    Annotated[int, Field(ge=0, le=MAX_SEED)],
    f"a non-empty list of distinct integers from 0 to 2**32 - 1 ({MAX_SEED}), e.g. [0, 1, 2]",
)
Curricula = Annotated[
    list[
        Annotated[
            VlmTable | OtherTable,
            Field(discriminator="name"),
            BeforeValidator(lambda item: {"name": item} if isinstance(item, str) else item),
        ]
    ],
    Field(
        min_length=1,
        description=f"a non-empty list of names ({', '.join(CURRICULA)}) or tables like "
        '{ name = "vlm", backend = "rules" }',
    ),
]
"""Distinct once "auto" is resolved: `_curricula` refuses two with the same slug."""


class MatrixSchema(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)
    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]*[A-Za-z0-9_-][A-Za-z0-9_.-]*$",
        description="letters, digits, '_', '.' or '-', not dots alone (it names a folder)",
    )
    description: str = Field("", description="a string")
    seeds: Seeds = [0]
    eval_episodes_per_skill: Count = 10
    curricula: Curricula = list(CURRICULA[:3])
    online: Any = None
    """[online] or [[online]] tables, each validated on its own (SECTIONS) to be named as such"""
    collect: Any = None


def _section(protocol: str) -> type[BaseModel]:
    """An [online] or [collect] section; a table named after a learner holds its own settings."""
    return create_model(
        f"{protocol}_section",
        __config__=STRICT,
        learners=(_names(LEARNERS[protocol]), ...),
        env_ids=(_names(ENV_IDS), ...),
        budget=(BUDGETS[protocol], Field(default_factory=dict, validate_default=True)),
        settings=(Table, {}),
        seeds=(Seeds, None),
        curricula=(Curricula, None),
        **{learner: (Table, None) for learner in LEARNERS[protocol]},
    )


SECTIONS = {protocol: _section(protocol) for protocol in PROTOCOLS}


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
    data = {"name": default_name, **data}
    matrix = _validate(MatrixSchema, data, "")
    if not any(data.get(protocol) not in (None, []) for protocol in PROTOCOLS):
        raise ValueError("the matrix spec has no protocol section; add [online] and/or [collect]")
    notes: list[str] = []
    defaults = _curricula(matrix.curricula, "curricula", notes)
    parts = []
    for protocol in PROTOCOLS:
        sections = data.get(protocol, [])
        for i, section in enumerate(sections if isinstance(sections, list) else [sections]):
            where = f"[[{protocol}]] #{i + 1}" if isinstance(sections, list) else f"[{protocol}]"
            section = _validate(SECTIONS[protocol], section, where)
            curricula = defaults
            if section.curricula is not None:
                curricula = _curricula(section.curricula, f"{where} curricula", notes)
            learner_settings = section.model_dump(
                include=set(LEARNERS[protocol]), exclude_none=True
            )
            parts.append(
                ProtocolSpec(
                    protocol=protocol,
                    learners=tuple(section.learners),
                    env_ids=tuple(section.env_ids),
                    seeds=tuple(section.seeds or matrix.seeds),
                    curricula=curricula,
                    eval_episodes_per_skill=matrix.eval_episodes_per_skill,
                    budget=section.budget.model_dump(exclude_unset=True),
                    settings=section.settings,
                    learner_settings=learner_settings,
                )
            )
            _check_protocol(parts[-1], where)
    _check_labels(parts)
    return MatrixSpec(matrix.name, matrix.description, tuple(parts), tuple(dict.fromkeys(notes)))


def _check_protocol(part: ProtocolSpec, where: str) -> None:
    """The rules of a section that its schema does not hold; ValueError names the broken one."""
    for learner in part.learner_settings:
        if learner not in part.learners:
            raise ValueError(f"{where} has settings for {learner} but learners omit it")
    owned, budget = OWNED_FIELDS[part.protocol], BUDGET_KEYS[part.protocol]
    for name, table in {"settings": part.settings, **part.learner_settings}.items():
        if clash := [key for key in table if key in owned or key in budget]:
            raise ValueError(
                f"{where} {name} may not set {', '.join(clash)}: the harness sets "
                f"{', '.join(owned)} and the budget table holds {', '.join(budget)}"
            )
    if part.protocol == "online" and any("max_cost" in c.options for c in part.curricula):
        raise ValueError(
            f"{where}: the vlm option max_cost (spending cap) applies to collect runs only; "
            "ppo and sac have no cap yet: give [online] its own curricula without max_cost"
        )


def _check_labels(parts: list[ProtocolSpec]) -> None:
    """Refuse two curricula of a protocol, learner and env that differ only in options their
    records do not label: reports and the leaderboard group runs by (protocol, label, learner,
    env) and would pool the two."""
    seen: dict[tuple[str, str, str, str], tuple[str, str, str]] = {}
    for part in parts:
        for learner, env_id, curriculum in itertools.product(
            part.learners, part.env_ids, part.curricula
        ):
            key = (part.protocol, curriculum.label, learner, env_id)
            settings = {**part.settings, **part.learner_settings.get(learner, {})}
            identity = (curriculum.slug, _resolved(curriculum.options), _resolved(settings))
            first = seen.setdefault(key, identity)
            if first == identity:
                continue
            what = (
                f"curricula {first[0]} and {curriculum.slug}"
                if first[:2] != identity[:2]
                else f"two sections' settings ({first[2]} and {identity[2]})"
            )
            raise ValueError(
                f"[{part.protocol}] {what} would both be labelled {curriculum.label!r} in the "
                f"run records of {learner} on {env_id}, and reports and the leaderboard group "
                "runs by that label, pooling the two; run them as separate matrices (each with "
                "its own results directory)"
            )


def _resolved(options: dict[str, Any]) -> str:
    """Options as one comparable text, with the files they name resolved (two stages files may
    share a name in two folders)."""
    resolved = {
        key: str(Path(value).resolve()) if key in PATH_OPTIONS and isinstance(value, str) else value
        for key, value in options.items()
    }
    return json.dumps(resolved, sort_keys=True, default=str)


def _curricula(tables: list[Any], where: str, notes: list[str]) -> tuple[CurriculumSpec, ...]:
    """Validated curriculum tables as specs; the vlm backend "auto" resolves here (in the notes)."""
    curricula = []
    for table in tables:
        options = table.model_dump(exclude_unset=True, exclude={"name"})
        if table.name == "vlm" and table.backend == "auto":
            options["backend"], reason = resolve_vlm_backend()
            notes.append(f"vlm backend auto -> {options['backend']}: {reason}")
            if options["backend"] in FREE_BACKENDS:  # it sends no requests to time or retry
                unused = ("timeout", "retries")
                if dropped := [key for key in unused if options.pop(key, None) is not None]:
                    notes.append(f"vlm {' and '.join(dropped)} unused: {options['backend']}")
        curricula.append(CurriculumSpec(table.name, options))
    by_slug: dict[str, CurriculumSpec] = {}
    for curriculum in curricula:
        earlier = by_slug.setdefault(curriculum.slug, curriculum)
        if earlier is curriculum:
            continue
        if earlier == curriculum:
            raise ValueError(f"{where} lists the same curriculum twice: {curriculum.slug}")
        raise ValueError(
            f"{where} curricula {earlier.to_dict()} and {curriculum.to_dict()} would share "
            f"the run id part {curriculum.slug!r} (run ids keep letters, digits and dots, "
            "the rest becomes '_'): change one so they differ in those"
        )
    return tuple(curricula)


def _validate(schema: type[BaseModel], data: Any, where: str) -> Any:
    """`data` as a `schema` instance; ValueError with one line on the first thing wrong."""
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        first = min(error.errors(), key=lambda e: e["type"] != "extra_forbidden")
        raise ValueError(_explain(first, data, schema, where)) from None


def _explain(error: Any, data: Any, schema: type[BaseModel], where: str) -> str:
    """A schema error as one line: where, as the TOML names it (e.g. "[online] budget"), the value
    given there, and what is accepted (the table's keys, or the field's description)."""
    words, value, models = [where] if where else [], data, [schema]
    accepted = f"a table of {_keys(schema)}"
    for part in error["loc"]:
        model = next((m for m in models if part in m.model_fields), None)
        if model:
            models = _models(model.model_fields[part].annotation)
            accepted = model.model_fields[part].description or f"a table of {_keys(models[0])}"
        if isinstance(part, int) and isinstance(value, list):
            value = value[part]
        elif isinstance(value, dict) and (part in value or model):
            words.append(part)
            value, accepted = value.get(part, {}), accepted if model else PLAIN_VALUE
        elif isinstance(value, dict) and value.get("name") == part:  # a curriculum's table
            words.append(part)
            models = [m for m in models if part in get_args(m.model_fields["name"].annotation)]
    here, parent = " ".join(words), " ".join(words[:-1]) or "the matrix spec"
    if error["type"] == "extra_forbidden":
        return f"unknown key {words[-1]!r} in {parent}; accepted keys: {_keys(models[0])}"
    if error["type"] == "missing":
        return f"{parent} needs {words[-1]}, {accepted}"
    if error["type"] == "value_error":
        return f"{here} {error['ctx']['error']}"
    return f"{here} must be {accepted}, got {value!r}"


def _keys(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds, e.g. [OnlineBudget] in OnlineBudget or list[...] of it."""
    if isinstance(annotation, type) and not get_args(annotation):
        return [annotation] if issubclass(annotation, BaseModel) else []
    return [model for arg in get_args(annotation) for model in _models(arg)]


def resolve_vlm_backend() -> tuple[str, str]:
    """What backend "auto" means here and why: gemini with a Gemini key, else rules."""
    for variable in KEY_VARIABLES:
        if os.environ.get(variable):
            return "gemini", f"{variable} is set"
    return "rules", f"neither {' nor '.join(KEY_VARIABLES)} is set (results labelled vlm[rules])"


def _slug_value(key: str, value: Any) -> str:
    """An option's value in a run id: a stages file by its name without folder and suffix, any
    other value whole (a model "Qwen/Qwen2.5-VL-7B-Instruct" kept its stem "Qwen2", so two models
    read as one curriculum), runs of other characters than letters, digits and dots as "_"."""
    text = str(value)
    if key == "path":
        text = Path(text).stem
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")


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
    """The expanded matrix as JSON-ready data (what matrix.json holds), with the digests of the
    files its runs read by path (`input_files`)."""
    runs = expand(spec)
    return {
        "format": "gameon-matrix-v1",
        "name": spec.name,
        "description": spec.description,
        "runs": [run.to_dict() for run in runs],
        "input_files": input_files(runs),
    }


def input_files(runs: Sequence[RunSpec]) -> dict[str, str | None]:
    """The sha256 of each file the runs read by path (`input_file_digests`): a hand curriculum's
    stages, a coded skill library, a VLM transcript to replay. Runs record only the path, so an
    edited file, or the same relative path read from another folder, would otherwise mix two
    inputs under one label."""
    paths = [
        value
        for run in runs
        for key, value in (*run.curriculum.options.items(), *run.settings.items())
        if key in PATH_OPTIONS
    ]
    return input_file_digests(paths)


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
        settable = names - {*OWNED_FIELDS[run.protocol], *BUDGET_KEYS[run.protocol]}
        raise ValueError(
            f"{', '.join(unknown)} is not a setting of {run.learner} "
            f"({cls.__module__}.{cls.__name__}); accepted: {', '.join(sorted(settable))} "
            f"(and in the budget table: {', '.join(BUDGET_KEYS[run.protocol])})"
        )
    # A run has one CPU (the runners start one per CPU): an online learner steps its envs in its
    # own process unless the settings say otherwise (the shared vector env would add a process).
    one_cpu = {"vectorization": "sync"} if run.protocol == "online" else {}
    values = {**one_cpu, **run.settings, **values}
    hints = get_type_hints(cls)
    for name in run.settings.keys() | curriculum_fields(run, names).keys():
        values[name] = _typed_setting(name, values[name], hints[name], run.learner)
    return cls(**values)


def _typed_setting(name: str, value: Any, hint: Any, learner: str) -> Any:
    """A setting's value checked against its config field's type (a TOML list may fill a tuple),
    so that a wrong type is named before any run starts rather than failing every run."""
    if isinstance(value, list) and get_origin(hint) is tuple:
        value = tuple(value)
    try:
        TypeAdapter(hint).validate_python(value, strict=True)
    except ValidationError as error:
        expected = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
        reason = error.errors()[0]["msg"]
        raise ValueError(
            f"setting {name} = {value!r} does not fit {learner}'s {name} ({expected}): {reason}"
        ) from None
    return value


def check_run(run: RunSpec) -> None:
    """Build and validate the config a run will use; ValueError says what is wrong."""
    config = run_config(run)
    if run.protocol == "collect":
        config.validate()
        return
    from gameon.baselines.common import make_training_curriculum

    importlib.import_module(f"gameon.baselines.{run.learner}").check_args(config)
    make_training_curriculum(config)


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
