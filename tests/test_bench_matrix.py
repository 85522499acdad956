"""The benchmark matrix: presets, expansion into runs, and spec errors that name what is wrong."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gameon.benchmark.matrix import (
    CURRICULA,
    PRESETS,
    RunSpec,
    expand,
    load_spec,
    parse_spec,
    resolve_vlm_backend,
    run_config,
    spec_path,
)
from gameon.benchmark.runner import write_matrix_file
from gameon.experimenter.loop import make_loop_curriculum

TINY = {
    "name": "tiny",
    "seeds": [0, 1],
    "eval_episodes_per_skill": 1,
    "curricula": ["fixed", "lp"],
    "online": {
        "learners": ["ppo"],
        "env_ids": ["GameOn/Reach-v0"],
        "budget": {"total_timesteps": 256},
        "ppo": {"num_steps": 64},
    },
}


def tiny(**changes) -> dict:
    spec = json.loads(json.dumps(TINY))
    for path, value in changes.items():
        table = spec
        *parents, key = path.split(".")
        for parent in parents:
            table = table[parent]
        table[key] = value
    return spec


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_parse_and_expand_to_unique_ids(preset, monkeypatch):
    for variable in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    runs = expand(load_spec(preset, check=False))
    ids = [run.run_id for run in runs]
    assert len(ids) == len(set(ids)) > 0
    assert all(run.curriculum.options.get("backend", "rules") == "rules" for run in runs)


def test_smoke_covers_every_curriculum_and_both_protocols():
    runs = expand(load_spec("smoke", check=False))
    assert {r.curriculum.name for r in runs if r.protocol == "collect"} == set(CURRICULA)
    controls = {"positive_control", "negative_control"}  # a multi-skill target needs every skill
    assert {r.curriculum.name for r in runs if r.protocol == "online"} == set(CURRICULA) - controls


def test_paper_is_the_collect_comparison_on_tower():
    runs = expand(load_spec("paper", check=False))
    assert {r.protocol for r in runs} == {"collect"}
    assert {r.env_id for r in runs} == {"GameOn/Tower-v0"}
    assert {r.curriculum.name for r in runs} == set(CURRICULA)
    assert {r.seed for r in runs} == {0, 1, 2, 3, 4}
    assert {r.settings["collector"] for r in runs} == {"demo"}
    assert all(r.settings["target_eval_episodes"] >= 20 for r in runs)


def test_the_controls_preset_runs_exactly_the_paper_presets_control_runs():
    paper = {r.run_id: r for r in expand(load_spec("paper", check=False))}
    controls = expand(load_spec("controls", check=False))
    assert len(controls) == 10
    for run in controls:
        assert run.curriculum.name in ("positive_control", "negative_control")
        assert run == paper[run.run_id]


def test_smoke_runs_get_checked_configs_that_carry_the_preset_settings(monkeypatch):
    for variable in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    checked = load_spec("smoke", check=True)
    assert checked == load_spec("smoke", check=False)
    runs = expand(checked)
    assert {(r.protocol, r.learner) for r in runs} == {
        ("online", "ppo"),
        ("online", "sac"),
        ("collect", "bc"),
        ("collect", "iql"),
    }
    for run in runs:
        config = run_config(run)
        owned = {"env_id": run.env_id, "seed": run.seed, "curriculum": run.curriculum.name}
        for key, value in {**run.budget, **run.settings, **owned}.items():
            assert getattr(config, key) == value, (run.run_id, key)


@pytest.mark.parametrize(
    ("line", "misspelt", "refused_run"),
    [
        pytest.param(
            "sac = { learning_starts = 128",
            "learning_start",
            "online__MultiSkill__fixed__sac__s0",
            id="online-learner-setting",
        ),
        pytest.param(
            'settings = { collector = "demo"',
            "target_eval_episode",
            "collect__Tower__fixed__bc__s0",
            id="collect-setting",
        ),
    ],
)
def test_checking_smoke_refuses_a_misspelt_setting_naming_the_run(
    tmp_path, line, misspelt, refused_run
):
    smoke = spec_path("smoke").read_text()
    assert smoke.count(line) == 1
    path = tmp_path / "smoke_misspelt.toml"
    path.write_text(smoke.replace(line, line.replace("{", f"{{ {misspelt} = 1,")))
    load_spec(path, check=False)  # parsing alone does not know the learners' settings
    with pytest.raises(ValueError, match=f"run {refused_run}: .*{misspelt} is not a setting of"):
        load_spec(path)


def test_expansion_order_ids_and_settings():
    runs = expand(parse_spec(tiny()))
    assert [r.run_id for r in runs] == [
        "online__Reach__fixed__ppo__s0",
        "online__Reach__fixed__ppo__s1",
        "online__Reach__lp__ppo__s0",
        "online__Reach__lp__ppo__s1",
    ]
    args = run_config(runs[0])
    assert (args.total_timesteps, args.num_steps, args.seed) == (256, 64, 0)
    assert (args.eval_episodes_per_skill, args.torch_threads) == (1, 1)
    assert RunSpec.from_dict(json.loads(json.dumps(runs[0].to_dict()))) == runs[0]


def test_curriculum_options_slug_label_and_mapping():
    spec = tiny(curricula=[{"name": "vlm", "backend": "rules"}])
    spec["collect"] = {"learners": ["bc"], "env_ids": ["GameOn/Tower-v0"]}
    runs = expand(parse_spec(spec))
    collect = [r for r in runs if r.protocol == "collect"]
    assert collect[0].run_id == "collect__Tower__vlm-rules__bc__s0"
    assert collect[0].curriculum.label == "vlm[rules]"
    assert run_config(collect[0]).vlm_backend == "rules"
    assert run_config(runs[0]).curriculum == "vlm"


def test_two_models_of_one_family_are_two_curricula_with_their_names_in_the_run_ids():
    """A model "Qwen/Qwen2.5-VL-7B-Instruct" went into run ids as its stem "Qwen2", so the 3B
    and 7B models were refused as the same curriculum twice."""
    models = ["Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct"]
    url = "http://localhost:8000/v1"
    curricula = [{"name": "vlm", "backend": "openai", "model": m, "base_url": url} for m in models]
    spec = tiny(curricula=curricula)
    slugs = sorted({run.curriculum.slug for run in expand(parse_spec(spec))})
    assert slugs == [
        "vlm-openai-http_localhost_8000_v1-Qwen_Qwen2.5_VL_3B_Instruct",
        "vlm-openai-http_localhost_8000_v1-Qwen_Qwen2.5_VL_7B_Instruct",
    ]


def test_results_made_with_a_stages_file_refuse_it_edited_or_read_from_elsewhere(
    tmp_path, monkeypatch
):
    """Runs record only the path: seed 0 practised one curriculum and seed 1, after an edit,
    another, pooled in one `hand` row."""
    stages = tmp_path / "stages.toml"
    stages.write_text('[[stage]]\nname = "a"\nskills = ["reach"]\nwindow = 3\nthreshold = 0.5\n')
    monkeypatch.chdir(tmp_path)
    spec = parse_spec(tiny(curricula=[{"name": "hand", "path": "stages.toml"}]))
    results = tmp_path / "results"
    results.mkdir()
    write_matrix_file(spec, results)
    write_matrix_file(spec, results)  # unchanged: resumes
    stages.write_text(stages.read_text().replace("0.5", "0.0"))
    with pytest.raises(ValueError, match="the file stages.toml has changed since these results"):
        write_matrix_file(spec, results)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ValueError, match="the file stages.toml cannot be read now"):
        write_matrix_file(spec, results)


@pytest.mark.parametrize("runs", ["oops", [1, 2], [{"id": 1}], None])
def test_a_hand_edited_matrix_json_of_another_shape_is_refused_in_one_line(tmp_path, runs):
    results = tmp_path / "results"
    results.mkdir()
    (results / "matrix.json").write_text(json.dumps({"format": "gameon-matrix-v1", "runs": runs}))
    with pytest.raises(ValueError, match="matrix.json is not a matrix; move it away"):
        write_matrix_file(parse_spec(tiny()), results)


def test_a_hand_stages_file_reaches_both_protocols_configs(tmp_path, monkeypatch):
    """`path` was an online-only option: under collect the spec was refused with no hint why."""
    stages = tmp_path / "stack_only.toml"
    stages.write_text('[[stage]]\nname = "a"\nskills = ["stack"]\nwindow = 3\nthreshold = 0.5\n')
    monkeypatch.chdir(tmp_path)
    spec = tiny(curricula=[{"name": "hand", "path": "stack_only.toml"}])
    spec["online"]["env_ids"] = ["GameOn/Stack-v0"]
    spec["collect"] = {"learners": ["bc"], "env_ids": ["GameOn/Stack-v0"]}
    runs = expand(parse_spec(spec))
    assert {run.protocol for run in runs} == {"online", "collect"}
    for run in runs:
        assert run_config(run).hand_curriculum == "stack_only.toml"
    collect = next(run for run in runs if run.protocol == "collect")
    assert collect.run_id == "collect__Stack__hand-stack_only__bc__s0"
    curriculum = make_loop_curriculum(run_config(collect))
    assert curriculum.stage_name == "a"
    stages.unlink()
    with pytest.raises(ValueError, match="no file at stack_only.toml \\(relative to the current"):
        make_loop_curriculum(run_config(collect))


def test_curricula_that_records_would_label_alike_are_refused():
    """Reports and the leaderboard group runs by the record's label, so two curricula that
    differ only in options it does not show would be pooled into one row."""
    rules = {"name": "vlm", "backend": "rules"}
    with pytest.raises(
        ValueError, match=r"vlm-rules and vlm-False-rules would both be .*vlm\[rules\]"
    ):
        parse_spec(tiny(curricula=[rules, {**rules, "add_skills": False}]))
    spec = tiny()
    section = spec.pop("online")
    spec["online"] = [section, {**section, "curricula": [{"name": "fixed", "tasks": "targets"}]}]
    with pytest.raises(ValueError, match="fixed and fixed-targets would both be labelled 'fixed'"):
        parse_spec(spec)
    spec["online"][1]["env_ids"] = ["GameOn/MultiSkill-v0"]
    parse_spec(spec)  # on another env they are two groups: nothing pools
    models = [{"name": "vlm", "backend": "openai", "model": m} for m in ("gpt-4o", "llama3")]
    labels = {r.curriculum.label for r in expand(parse_spec(tiny(curricula=models)))}
    assert labels == {"vlm[openai:gpt-4o]", "vlm[openai:llama3]"}, "two models are two rows"


def test_vlm_auto_backend_depends_on_the_key(monkeypatch):
    for variable in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    assert resolve_vlm_backend()[0] == "rules"
    spec = parse_spec(tiny(curricula=[{"name": "vlm"}]))
    assert expand(spec)[0].run_id == "online__Reach__vlm-rules__ppo__s0"
    assert "rules" in spec.notes[0]
    monkeypatch.setenv("GOOGLE_API_KEY", "not-a-real-key")
    backend, reason = resolve_vlm_backend()
    assert (backend, reason) == ("gemini", "GOOGLE_API_KEY is set")
    assert "not-a-real-key" not in json.dumps([r.to_dict() for r in expand(parse_spec(tiny()))])


def test_vlm_timeout_and_retries_reach_the_config_and_are_dropped_when_auto_means_rules(
    monkeypatch,
):
    for variable in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    transport = {"name": "vlm", "timeout": 120, "retries": 5}
    local = {**transport, "backend": "openai", "base_url": "http://127.0.0.1:9/v1"}
    config = run_config(expand(parse_spec(tiny(curricula=[local])))[0])
    assert (config.vlm_timeout, config.vlm_retries) == (120, 5)
    spec = parse_spec(tiny(curricula=[transport]))
    assert "vlm timeout and retries unused: rules" in spec.notes
    config = run_config(expand(spec)[0])
    assert (config.vlm_backend, config.vlm_timeout, config.vlm_retries) == ("rules", None, None)


def test_a_protocol_can_have_several_sections():
    spec = tiny()
    section = spec.pop("online")
    spec["online"] = [section, {**section, "env_ids": ["GameOn/MultiSkill-v0"], "seeds": [7]}]
    ids = [r.run_id for r in expand(parse_spec(spec))]
    assert "online__MultiSkill__lp__ppo__s7" in ids and len(ids) == 6


def test_a_curriculum_listed_twice_is_refused_as_the_same_curriculum():
    with pytest.raises(ValueError, match="lists the same curriculum twice: fixed"):
        parse_spec(tiny(curricula=["fixed", "hand", "fixed"]))


def test_two_models_whose_run_ids_would_coincide_are_refused_naming_both():
    """`gpt-4o` and `gpt_4o` are two models, but both become "gpt_4o" in a run id: the error
    used to call them the same curriculum twice."""
    models = [{"name": "vlm", "backend": "openai", "model": m} for m in ("gpt-4o", "gpt_4o")]
    with pytest.raises(ValueError) as error:
        parse_spec(tiny(curricula=models))
    message = str(error.value)
    assert "'gpt-4o'" in message and "'gpt_4o'" in message
    assert "would share the run id part 'vlm-openai-gpt_4o'" in message
    assert "same curriculum" not in message


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"budgets": 1}, "unknown key 'budgets' in the matrix spec; accepted keys: name"),
        ({"online.learner": ["ppo"]}, "unknown key 'learner' in [online]; accepted keys: learners"),
        (
            {"curricula": ["fixed", "random"]},
            "curricula must be a non-empty list of names (fixed, hand, lp, vlm, positive_control, "
            "negative_control) or tables",
        ),
        (
            {"online.learners": ["bc"]},
            "[online] learners must be a non-empty list of: ppo, sac, got 'bc'",
        ),
        (
            {"online.env_ids": ["GameOn/Fly-v0"]},
            "env_ids must be a non-empty list of: GameOn/Reach-v0, GameOn/Lift-v0",
        ),
        ({"online.budget": {"iterations": 2}}, "unknown key 'iterations' in [online] budget"),
        ({"online.budget": {"eval_every": 10}}, "[online] budget needs total_timesteps"),
        ({"online.budget.total_timesteps": -5}, "total_timesteps must be an integer >= 1"),
        ({"online.settings": {"seed": 3}}, "may not set seed: the harness sets"),
        ({"online.settings": {"torch_threads": 2}}, "may not set torch_threads: the harness"),
        ({"seeds": [0, 0]}, "seeds lists 0 twice"),
        ({"seeds": [0, -1]}, "seeds must be a non-empty list of distinct integers from 0 to"),
        (
            {"seeds": [2**32]},
            "seeds must be a non-empty list of distinct integers from 0 to 2**32 - 1 "
            "(4294967295), e.g. [0, 1, 2], got 4294967296",
        ),
        ({"online.seeds": [0, 2**32]}, "[online] seeds must be a non-empty list of distinct"),
        (
            {"curricula": [{"name": "vlm", "backend": "gpt"}]},
            "vlm backend must be one of: auto, rules, gemini, openai, replay, got 'gpt'",
        ),
        ({"online.sac": {"batch_size": 8}}, "settings for sac but learners omit it"),
        ({"eval_episodes_per_skill": 0}, "eval_episodes_per_skill must be an integer >= 1"),
        ({"name": ".."}, "name must be letters, digits, '_', '.' or '-', not dots alone"),
        ({"name": "."}, "not dots alone (it names a folder), got '.'"),
    ],
)
def test_spec_errors_name_the_key_and_the_accepted_values(changes, message):
    with pytest.raises(ValueError) as error:
        parse_spec(tiny(**changes))
    assert message in str(error.value)


def test_the_largest_seed_every_learner_accepts_is_accepted():
    runs = expand(parse_spec(tiny(seeds=[0, 2**32 - 1])))
    assert sorted({run.seed for run in runs}) == [0, 2**32 - 1]


def test_spec_without_protocols_is_refused():
    spec = tiny()
    del spec["online"]
    with pytest.raises(ValueError, match=r"no protocol section; add \[online\]"):
        parse_spec(spec)


@pytest.mark.parametrize("protocol", ["online", "collect"])
def test_an_empty_list_of_protocol_sections_is_refused(protocol):
    """`online = []` is an array of no [[online]] tables: a matrix of no runs, not a spec."""
    with pytest.raises(ValueError, match=r"no protocol section; add \[online\]"):
        parse_spec({protocol: []})


def test_checked_spec_refuses_unknown_settings_and_impossible_curricula(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(
        'seeds = [0]\ncurricula = ["fixed"]\n[online]\nlearners = ["ppo"]\n'
        'env_ids = ["GameOn/Reach-v0"]\nbudget = { total_timesteps = 64 }\n'
        "ppo = { learning_starts = 10 }\n"
    )
    with pytest.raises(ValueError, match="learning_starts is not a setting of ppo") as refused:
        load_spec(path)
    accepted = str(refused.value).split("accepted: ")[1]
    assert "num_steps" in accepted and "(and in the budget table: total_timesteps" in accepted
    assert not {"seed", "env_id", "curriculum", "run_dir"} & set(
        accepted.split(" (")[0].split(", ")
    )
    path.write_text(path.read_text().replace('"fixed"', '"hand"').replace("ppo = {", "x = {"))
    with pytest.raises(ValueError, match="unknown key 'x'"):
        load_spec(path)
    path.write_text(path.read_text().replace("x = { learning_starts = 10 }\n", ""))
    with pytest.raises(ValueError, match="curriculum 'hand' cannot train on GameOn/Reach-v0"):
        load_spec(path)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "update_epochs = 2.5",
            r"setting update_epochs = 2\.5 does not fit ppo's update_epochs \(int\)",
        ),
        ('num_steps = "64"', r"setting num_steps = '64' does not fit ppo's num_steps \(int\)"),
        (
            'vectorization = "fork"',
            r"setting vectorization = 'fork' does not fit ppo's vectorization "
            r"\(Literal\['shared', 'sync', 'async'\]\): Input should be",
        ),
        ("anneal_lr = 1", r"setting anneal_lr = 1 does not fit ppo's anneal_lr \(bool\)"),
    ],
)
def test_checked_spec_refuses_a_setting_of_the_wrong_type_before_any_run(
    tmp_path, setting, expected
):
    path = tmp_path / "typed.toml"
    base = (
        'seeds = [0]\ncurricula = ["fixed"]\n[online]\nlearners = ["ppo"]\n'
        'env_ids = ["GameOn/Reach-v0"]\nbudget = { total_timesteps = 64 }\n'
    )
    path.write_text(base + f"ppo = {{ {setting} }}\n")
    with pytest.raises(ValueError, match=f"run online__Reach__fixed__ppo__s0: {expected}"):
        load_spec(path)
    path.write_text(
        base + 'ppo = { hidden = [32, 32], learning_rate = 1, vectorization = "sync" }\n'
    )
    load_spec(path)  # a TOML list fills a tuple, an integer a float


def test_unknown_spec_names_the_presets():
    expected = "give a preset \\(smoke, paper, controls, full\\) or a TOML file"
    with pytest.raises(ValueError, match=expected):
        load_spec("smok")


def test_a_results_dir_refuses_another_matrix(tmp_path):
    write_matrix_file(parse_spec(tiny()), tmp_path)
    write_matrix_file(parse_spec(tiny()), tmp_path)  # the same spec resumes
    with pytest.raises(ValueError, match="holds the results of another matrix"):
        write_matrix_file(parse_spec(tiny(seeds=[0, 2])), tmp_path)
    with pytest.raises(ValueError, match=r"other settings, e.g. .* \(budget\)"):
        write_matrix_file(parse_spec(tiny(**{"online.budget.total_timesteps": 512})), tmp_path)
    assert json.loads((tmp_path / "matrix.json").read_text())["name"] == "tiny"


def test_sections_alike_but_for_a_stages_folder_or_settings_are_refused(tmp_path, monkeypatch):
    """Two stages files named alike in two folders, and two sections with other settings (dense
    and sparse rewards), were each pooled in one row: only the run-id part of the curriculum,
    which drops the folder, was compared."""
    text = '[[stage]]\nname = "a"\nskills = ["reach"]\nwindow = 3\nthreshold = {}\n'
    for folder, threshold in (("v1", 0.8), ("v2", 0.5)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "hand.toml").write_text(text.format(threshold))
    monkeypatch.chdir(tmp_path)
    spec = tiny()
    section = spec.pop("online")
    spec.pop("seeds")
    spec["online"] = [
        {**section, "seeds": [seed], "curricula": [{"name": "hand", "path": f"{folder}/hand.toml"}]}
        for seed, folder in ((0, "v1"), (1, "v2"))
    ]
    with pytest.raises(ValueError, match="curricula hand-hand and hand-hand would both be"):
        parse_spec(spec)
    spec["online"][1]["curricula"] = spec["online"][0]["curricula"]
    parse_spec(spec)  # the same file: one curriculum in two sections
    for seed, rewards in enumerate(("dense", "sparse")):
        spec["online"][seed]["settings"] = {"reward_mode": rewards}
    with pytest.raises(ValueError, match="two sections' settings .* would both be labelled 'hand'"):
        parse_spec(spec)


def test_a_coded_skill_library_is_tracked_like_a_stages_file(tmp_path, monkeypatch):
    """Runs record only the coded_skills path: a library edited between seeds went on unnoticed
    (s0 trained with 4 coded skills, s1 with 1, one row)."""
    (tmp_path / "lib.json").write_text('{"skills": []}')
    monkeypatch.chdir(tmp_path)
    spec = parse_spec(tiny(**{"online.settings": {"coded_skills": "lib.json"}}))
    results = tmp_path / "results"
    results.mkdir()
    write_matrix_file(spec, results)
    assert "lib.json" in json.loads((results / "matrix.json").read_text())["input_files"]
    (tmp_path / "lib.json").write_text('{"skills": [1]}')
    with pytest.raises(ValueError, match="the file lib.json has changed since these results"):
        write_matrix_file(spec, results)


def test_a_record_made_with_other_settings_is_not_this_matrixs_run():
    """Only the budget was compared: a dense-reward record copied into a matrix of sparse
    rewards was taken for a failed attempt, deleted and run over."""
    from record_factory import make_record

    from gameon.benchmark.runs import record_difference
    from gameon.records import Training

    spec = tiny(seeds=[0], curricula=["fixed"], **{"online.settings": {"reward_mode": "sparse"}})
    (run,) = expand(parse_spec(spec))
    record = make_record(0, [True], "fixed", learner="ppo", protocol="online")
    config = json.loads(json.dumps(dataclasses.asdict(run_config(run)), default=str))
    budget = {key: config[key] for key in ("total_timesteps", "eval_every", "num_envs")}
    record = record.model_copy(update={"budget": budget, "training": Training(config=config)})
    assert record_difference(run, record) is None
    config["reward_mode"] = "dense"
    record = record.model_copy(update={"training": Training(config=config)})
    assert record_difference(run, record) == "reward_mode 'dense', not 'sparse'"
