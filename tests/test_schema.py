"""config/schema.yaml states the same enums and bounds as the package's validators (one validation path):
the corpus config (attention_geometry.data.corpus_config), the run settings (training.config), the hyperparameter
overrides (training.models). A change on one side only fails here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from attention_geometry.data import corpus_config as corpus_cfg
from attention_geometry.formats.corpus import CorpusError
from attention_geometry.formats.value_kinds import SCHEMA_TYPES, expected
from attention_geometry.training import run_config as run_cfg
from attention_geometry.training.hyper import (
    BETA_BOUNDS,
    HYPER_BOUNDS,
    HYPER_ENUMS,
    HYPER_KINDS,
    IMAGE_SIZES,
    INITS,
    RUN_OBJECTIVES,
    SIZES,
    Hyper,
)

SCHEMA = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "schema.yaml").read_text())
DEFS = SCHEMA["definitions"]
CORPUS = SCHEMA["properties"]["corpora"]["additionalProperties"]["properties"]
TRAINING = SCHEMA["properties"]["training"]["properties"]
GROUP = TRAINING["groups"]["additionalProperties"]["properties"]
RUN_ITEM = GROUP["runs"]["items"]["properties"]
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def enum(prop: dict) -> set:
    """The allowed values of an enum property (or of a oneOf value-or-list of it)."""
    if "enum" in prop:
        return set(prop["enum"])
    values = [set(p["enum"]) if "enum" in p else set(p["items"]["enum"]) for p in prop["oneOf"]]
    assert all(v == values[0] for v in values), prop
    return values[0]


def bounds(prop: dict) -> dict:
    return {k: prop[k] for k in BOUNDS if k in prop}


def flat(props: dict, prefix: str = "") -> dict[str, dict]:
    """Dotted key -> property of a corpus config (tokenizer.*, hub.* one level down)."""
    out = {}
    for key, prop in props.items():
        if prop.get("type") == "object" and "properties" in prop:
            out.update(flat(prop["properties"], f"{key}."))
        else:
            out[prefix + key] = prop
    return out


# ---------------------------------------------------------------------------------------------- corpora


def test_corpus_keys_are_the_config_fields():
    assert set(CORPUS) | {"name"} == fields(corpus_cfg.CorpusConfig)  # name: set to the corpus key
    assert set(CORPUS["tokenizer"]["properties"]) == fields(corpus_cfg.TokenizerConfig)
    assert set(CORPUS["hub"]["properties"]) == fields(corpus_cfg.HubConfig)


def test_corpus_enums():
    assert enum(CORPUS["dataset"]) == set(corpus_cfg.DATASETS)
    assert enum(CORPUS["one_document_per"]) == set(corpus_cfg.ONE_DOCUMENT_PER)
    assert enum(CORPUS["tokenizer"]["properties"]["kind"]) == set(corpus_cfg.TOKENIZER_KINDS)


def test_corpus_bounds():
    expected = {key: {"minimum": m} for key, m in corpus_cfg.MINIMUMS.items()}
    for key, high in corpus_cfg.EXCLUSIVE_MAXIMUMS.items():
        expected[key]["exclusiveMaximum"] = high
    got = {key: bounds(p) for key, p in flat(CORPUS).items() if bounds(p)}
    assert got == expected


def test_corpus_bounds_are_enforced():
    """The package rejects a value just outside each bound the schema states (and accepts the bound)."""
    base = {"dataset": "text_files", "paths": ["x"]}
    for key, minimum in corpus_cfg.MINIMUMS.items():
        top, _, sub = key.partition(".")
        raw = dict(base, **({top: {sub: minimum - 1}} if sub else {top: minimum - 1}))
        with pytest.raises(CorpusError, match=f"`{key}`"):
            corpus_cfg.corpus_config_from_dict(raw)
        corpus_cfg.corpus_config_from_dict(dict(base, **({top: {sub: minimum}} if sub else {top: minimum})))
    for key, high in corpus_cfg.EXCLUSIVE_MAXIMUMS.items():
        with pytest.raises(CorpusError, match=f"`{key}`"):
            corpus_cfg.corpus_config_from_dict(dict(base, **{key: high}))


# ---------------------------------------------------------------------------------------------- training


def test_run_settings_are_run_config_keys_with_the_same_bounds():
    """The schema's run_settings are exactly RunConfig's fields marked as settings (RUN_SETTINGS), with their
    bounds; a group's settings and a run entry take those keys alone (one list of them, by $ref), so a new run
    setting is its schema entry and its RunConfig field (CONTRIBUTING.md, "Adding a run setting")."""
    settings = DEFS["run_settings"]["properties"]
    assert set(settings) == set(run_cfg.RUN_SETTINGS)
    for obj in (GROUP["settings"], GROUP["runs"]["items"]):
        assert obj["$ref"] == "#/definitions/run_settings" and obj["unevaluatedProperties"] is False, obj
    assert "additionalProperties" not in DEFS["run_settings"]  # each object that uses it closes itself
    # a run entry: the run's identity (size, corpus, objective, init, seed) plus the settings it overrides
    assert set(RUN_ITEM) == {"size", "corpus", "objective", "init", "seed"}
    assert DEFS["int_or_list"]["oneOf"][0] == {"type": "integer", "minimum": run_cfg.RUN_MINIMUMS["seed"]}
    assert DEFS["int_or_list"]["oneOf"][1]["items"] == DEFS["int_or_list"]["oneOf"][0]
    assert RUN_ITEM["seed"] == {"$ref": "#/definitions/int_or_list"}
    for key, prop in settings.items():
        if key in run_cfg.RUN_MINIMUMS:
            assert bounds(prop) == {"minimum": run_cfg.RUN_MINIMUMS[key]}, key
        elif key.endswith("_steps"):
            assert prop["items"] == {"type": "integer", "minimum": 0}, key
        elif key in ("overrides", "regularizer"):
            assert prop == {"$ref": f"#/definitions/{key}"}, key
        else:
            assert not bounds(prop), key
    assert set(run_cfg.RUN_MINIMUMS) - set(settings) == {"threads", "seed"}  # workflow-wide; a run's identity
    assert bounds(TRAINING["threads"]) == {"minimum": run_cfg.RUN_MINIMUMS["threads"]}
    assert enum(TRAINING["device"]) == set(run_cfg.DEVICES)


def _sample(prop: dict):
    """A valid value of a run setting's schema property (small: every step within max_steps 2)."""
    if "$ref" in prop:
        return {}
    if "enum" in prop:
        return prop["enum"][0]
    return {"integer": 2, "number": 0.5, "boolean": True, "string": "x", "array": [0], "object": {}}[prop["type"]]


def test_every_run_setting_goes_from_the_workflow_config_into_run_yaml_and_back():
    """Each run setting of the schema, given in a workflow group, is in the plan's RunConfig of the run and in the
    RUN.yaml the workflow writes, which the trainer reads back to the same RunConfig: nothing names the settings
    one by one on the way (a new setting needs no code of its own there)."""
    from helpers import config_plan, validated_config

    settings = {k: _sample(p) for k, p in DEFS["run_settings"]["properties"].items()}
    cfg = validated_config("smoke.yaml")
    main = cfg["training"]["groups"]["main"]
    explicit = {k: v for k, v in settings.items() if not k.endswith("_every")}  # X_steps and X_every exclude
    every = {k: v for k, v in settings.items() if not k.endswith("_steps") or k == "max_steps"}  # each other
    main["settings"] = explicit
    cfg["training"]["groups"]["other"] = {"settings": every, "runs": [{**main["runs"][0], "seed": 7}]}
    cfg["updates"]["steps"] = [0]
    plan = config_plan(cfg)
    seen = set()
    for name, run in plan.runs.items():
        text = plan.run_yaml(name)
        back = run_cfg.run_config_from_dict(yaml.safe_load(text))
        assert back == run.config and back.as_mapping() == run.config.as_mapping()
        for key, value in run.config.settings().items():
            assert yaml.safe_load(text)[key] == value == getattr(run.config, key)
            seen.add(key)
    assert seen == set(run_cfg.RUN_SETTINGS)


# how run.yaml has recorded each setting since it existed, written out here by hand: "always" (under its name in
# every run.yaml) or "folded" (into another key: the step lists, `hyper`)
RUN_YAML_RECORDS = {
    "max_steps": "always",
    "snapshot_steps": "always",
    "snapshot_every": "folded",
    "eval_steps": "always",
    "eval_every": "folded",
    "eval_blocks": "always",
    "state_every": "always",
    "log_every": "always",
    "overrides": "folded",
    "regularizer": "always",
}


def test_each_existing_setting_is_recorded_in_run_yaml_as_it_always_was():
    setting_fields = [f for f in dataclasses.fields(run_cfg.RunConfig) if f.metadata.get("setting")]
    declared = {f.name: f.metadata["run_yaml"] for f in setting_fields}
    assert declared == RUN_YAML_RECORDS


def _new_setting_config():
    """RunConfig with one more setting declared as a field alone (CONTRIBUTING's second edit), a pass-through
    one (`probe_every`) and a resolved one (`probe_steps`, the snapshot steps past half the run)."""

    @dataclasses.dataclass(frozen=True)
    class WithNew(run_cfg.RunConfig):
        probe_every: int = run_cfg.run_key("int", 7, minimum=1, setting=True)
        probe_steps: int = run_cfg.run_key(
            "int", 0, setting=True, resolve=lambda cfg, h, data: [s for s in range(0, h.max_steps + 1, 2) if s > 2]
        )

    return WithNew


def test_a_new_setting_declared_as_a_field_alone_reaches_run_yaml_and_show_run(tmp_path):
    """A new setting is recorded only where it is given a value other than its default (a run dir of a run that
    does not use it resumes as before), the pass-through one as given, the resolved one as its `resolve` makes
    it; nothing else names it. The existing keys keep their place and values."""
    from helpers import write_random_corpus

    from attention_geometry.formats.corpus import load_corpus
    from attention_geometry.training.hyper import resolve_hyper

    corpus = load_corpus(write_random_corpus(tmp_path / "c", n_train=8, n_heldout=3, block_len=16, vocab=40))
    WithNew = _new_setting_config()
    base = run_cfg.run_config_from_dict({"corpus": str(corpus.path), "max_steps": 6, "eval_blocks": 5})
    plain = WithNew(**{k: getattr(base, k) for k in run_cfg.TYPES})
    used = dataclasses.replace(plain, probe_every=3, probe_steps=1)
    h = dataclasses.replace(resolve_hyper("tiny", {}), max_steps=6)
    expected_common = {
        "max_steps": 6,
        "snapshot_steps": (0, 6),  # rundir.snapshot_steps: 0 and max_steps when neither list nor interval is given
        "eval_steps": (0, 6),
        "eval_blocks": 3,  # at most the corpus's 3 held-out blocks
        "state_every": 1000,
        "log_every": 1,
        "regularizer": {"lambda": 0.0},
    }
    assert run_cfg.resolved_settings(plain, h, corpus) == expected_common
    assert list(run_cfg.resolved_settings(used, h, corpus).items()) == [
        *expected_common.items(),
        ("probe_every", 3),
        ("probe_steps", [4, 6]),
    ]
    # before the data exists (show-run): eval_blocks as given
    assert run_cfg.resolved_settings(used, h)["eval_blocks"] == 5
    resolved = run_cfg.resolve_run(used, corpus)
    assert resolved.probe_every == 3 and resolved.log_every == 1 and resolved.snapshot_steps == (0, 6)
    with pytest.raises(AttributeError, match="probe_never"):
        resolved.probe_never  # noqa: B018
    record = resolved.as_run_yaml()
    keys = list(record)
    assert keys[keys.index("max_steps") : keys.index("hyper")] == [*expected_common, "probe_every", "probe_steps"]
    assert record["snapshot_steps"] == [0, 6] and record["probe_steps"] == [4, 6]
    assert "probe_every" not in run_cfg.resolve_run(plain, corpus).as_run_yaml()


def test_run_yaml_field_declarations_refuse_an_unknown_record():
    with pytest.raises(ValueError, match="sometimes"):
        run_cfg.run_key("int", 1, setting=True, run_yaml="sometimes")


def test_run_identity_enums():
    assert enum(RUN_ITEM["size"]) == set(SIZES) | set(IMAGE_SIZES)
    assert enum(RUN_ITEM["objective"]) == set(RUN_OBJECTIVES)
    assert enum(RUN_ITEM["init"]) == set(INITS)
    updates, figures = SCHEMA["properties"]["updates"]["properties"], SCHEMA["properties"]["figures"]["properties"]
    assert enum(updates["inits"]["items"]) == set(INITS)
    assert enum(figures["baseline_init"]) == set(INITS)


def test_overrides_are_the_hyperparameters_with_the_same_enums_and_bounds():
    props = DEFS["overrides"]["properties"]
    assert set(props) == fields(Hyper)
    assert DEFS["overrides"]["additionalProperties"] is False
    for key, values in HYPER_ENUMS.items():
        assert enum(props[key]) == set(values), key
    got = {key: bounds(p) for key, p in props.items() if bounds(p)}
    assert got == HYPER_BOUNDS
    assert bounds(props["betas"]["items"]) == BETA_BOUNDS


def test_regularizer():
    reg = DEFS["regularizer"]
    assert reg["additionalProperties"] is False
    assert {k: bounds(p) for k, p in reg["properties"].items()} == {
        k: {"minimum": m} for k, m in run_cfg.REGULARIZER_MINIMUMS.items()
    }


COMMITTED_CONFIGS = sorted(
    p for p in (Path(__file__).resolve().parents[1] / "config").glob("*.yaml") if p.name != "schema.yaml"
)


@pytest.mark.parametrize("path", COMMITTED_CONFIGS, ids=[p.name for p in COMMITTED_CONFIGS])
def test_the_committed_configs_validate(path):
    """Every workflow config in config/ (the glob: a new one is covered without being named here)."""
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(yaml.safe_load(path.read_text()), SCHEMA)


def test_the_glob_finds_every_config_the_repository_names():
    names = {p.name for p in COMMITTED_CONFIGS}
    assert {"config.yaml", "paper.yaml", "smoke.yaml", "study1.yaml", "study2.yaml", "paper-first-look.yaml"} <= names


# ---------------------------------------------------------------------------------------------- types


def schema_type(prop: dict):
    if "$ref" in prop:
        return DEFS[prop["$ref"].rsplit("/", 1)[-1]].get("type")
    return prop.get("type")


def check_types(props: dict, kinds: dict, skip=()) -> None:
    """Each schema property has the JSON type of the package's value kind; null only where the package
    takes null (the schema may refuse a null the package would read as 'the default')."""
    for key, prop in props.items():
        if key in skip:
            continue
        kind = kinds[key]
        if "enum" in prop or "oneOf" in prop:  # an enum: each value is one the package's kind accepts
            assert all(expected(v, kind) is None for v in enum(prop)), key
            continue
        base = SCHEMA_TYPES[kind.removeprefix("opt_")]
        got = schema_type(prop)
        types = set(got) if isinstance(got, list) else {got}
        if "null" in types:
            assert kind.startswith("opt_"), key
            types.discard("null")
        assert types == {base}, (key, got, kind)


def test_schema_types_are_the_package_kinds():
    check_types(CORPUS, corpus_cfg.TYPES, skip=("paths", "suffixes", "tokenizer", "hub"))
    for key in ("paths", "suffixes"):  # the package also takes one string
        assert CORPUS[key] == {**CORPUS[key], "type": "array", "items": {"type": "string"}}
    check_types(CORPUS["tokenizer"]["properties"], corpus_cfg.TOKENIZER_TYPES)
    check_types(CORPUS["hub"]["properties"], corpus_cfg.HUB_TYPES, skip=("data_files",))
    assert "type" not in CORPUS["hub"]["properties"]["data_files"] and corpus_cfg.HUB_TYPES["data_files"] == "any"
    check_types(DEFS["run_settings"]["properties"], run_cfg.TYPES)
    check_types(DEFS["overrides"]["properties"], HYPER_KINDS)
