"""CLI `show-run`: one planned run's settings, from the workflow config alone.

A run's RUN.yaml is written by the workflow only once its corpus is prepared (rule write_run_config takes the
corpus as input), and run.yaml, with every value filled in, only when the trainer starts. Before that, this prints
what the config already decides: the run's identity and groups, its steps and intervals, the run settings, and
every hyperparameter after the size's defaults and the entry's overrides; and, in a section of its own, what only
the prepared data decides (a text run's vocab_size and seq_len; an image run's image size, channels and classes),
with what the config says about it. The runs come from the workflow's own expansion (workflow.runs.expand_runs, the
trainer's checks included), so the settings printed are the planned ones; no corpus, hub or torch is touched.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from attention_geometry.errors import ConfigError, UserError
from attention_geometry.formats.files import read_yaml
from attention_geometry.training.hyper import IMAGE_ONLY_FIELDS, TEXT_ONLY_FIELDS, resolve_hyper
from attention_geometry.training.run_config import RunConfig, is_image_run, resolved_settings
from attention_geometry.workflow.runs import Run, expand_corpora, expand_runs

__all__ = ["planned_runs", "run_settings", "run_show_run"]


def _section(config: Mapping, *keys: str, where: str) -> Any:
    value: Any = config
    for i, key in enumerate(keys):
        if not isinstance(value, Mapping) or key not in value:
            raise ConfigError(f"{where}: no {'.'.join(keys[: i + 1])} (a workflow config: config/README.md)")
        value = value[key]
    return value


def _check_schema(config: Any, configfile: Path) -> None:
    """The schema's check where it can run: config/schema.yaml beside the config, and jsonschema installed (it
    comes with Snakemake). Without either, the runs are still checked as the trainer checks them."""
    schema = configfile.parent / "schema.yaml"
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        return
    if schema.is_file():
        from attention_geometry.workflow.plan import schema_error

        error = schema_error(config, str(schema))
        if error:
            raise ConfigError(f"{configfile}: {error}")


def planned_runs(config: Any, where: str) -> dict[str, Run]:
    """run name -> Run of a workflow config (the workflow's expansion and its checks)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{where}: expected a mapping of sections, got {type(config).__name__}")
    groups = _section(config, "training", "groups", where=where)
    corpora = expand_corpora(_section(config, "corpora", where=where) or {})
    images = config.get("images") or {}
    return expand_runs(groups, corpora, images, str(config.get("results", "results")))[0]


def _unknown_run(name: str, runs: Mapping[str, Run], where: str) -> UserError:
    ratio = {r: difflib.SequenceMatcher(None, name, r).ratio() for r in runs}
    close = sorted((r for r in runs if ratio[r] >= 0.6), key=lambda r: (-ratio[r], r))[:5]  # ties in name order
    hint = f"close matches: {', '.join(close)}" if close else f"its runs are named like {next(iter(runs), 'none')}"
    return UserError(f"{where}: no planned run {name!r} among its {len(runs)} runs; {hint}")


def _from_data(run: Run, config: Mapping, hyper: Mapping[str, Any]) -> dict[str, str]:
    """What only the prepared data decides, each with what the config says about it."""
    if is_image_run(run.objective):
        data = (config.get("images") or {}).get(run.dataset, {})
        where = f"config images.{run.dataset}, dataset {data.get('dataset', run.dataset)}"
        return {
            key: f"{key} of the prepared image set ({where})" for key in ("image_size", "num_channels", "num_classes")
        }
    from attention_geometry.data.corpus_config import corpus_config_from_dict

    where = f"config corpora.{run.dataset}"
    corpus = corpus_config_from_dict(expand_corpora(config["corpora"])[run.dataset], where=where)
    tok = corpus.tokenizer
    out = {}
    if hyper["vocab_size"] is None:
        if tok.kind == "wordpiece":
            out["vocab_size"] = (
                f"vocabulary of the prepared corpus, a WordPiece of at most {tok.vocab_size} tokens learned on its "
                f"train split ({where}.tokenizer)"
            )
        else:
            out["vocab_size"] = f"vocabulary of the prepared corpus, that of tokenizer {tok.name} ({where}.tokenizer)"
    if hyper["seq_len"] is None:
        out["seq_len"] = f"block_len of the prepared corpus, {corpus.block_len} ({where}.block_len)"
    return out


def run_settings(run: Run, config: Mapping) -> dict[str, Any]:
    """What a planned run is, before its data exists (the mapping `show-run` prints)."""
    cfg: RunConfig = run.config
    h = resolve_hyper(cfg.size, cfg.overrides, where="overrides")
    if cfg.max_steps is not None:
        h = dataclasses.replace(h, max_steps=cfg.max_steps)
    skip = TEXT_ONLY_FIELDS if is_image_run(run.objective) else IMAGE_ONLY_FIELDS
    hyper = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(h).items() if k not in skip}
    from_data = _from_data(run, config, hyper)
    settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in resolved_settings(cfg, h).items()}
    return {
        "run": run.name,
        "groups": list(run.groups),
        **run.spec,
        "data": cfg.corpus,
        **settings,  # as run.yaml will record them, but eval_blocks as given (the data may hold fewer)
        "overrides": dict(cfg.overrides or {}),
        "hyper": {k: v for k, v in hyper.items() if k not in from_data},
        ("from_images" if is_image_run(run.objective) else "from_corpus"): from_data,
    }


def run_show_run(args: argparse.Namespace) -> int:
    configfile = Path(args.configfile)
    config = read_yaml(configfile, "workflow config", ConfigError)
    _check_schema(config, configfile)
    runs = planned_runs(config, str(configfile))
    if args.list:
        if args.run is not None:
            raise UserError(f"show-run: give a run name or --list, not both ({args.run!r})")
        print("\n".join(sorted(runs)))
        return 0
    if args.run is None:
        raise UserError(f"show-run: name a run of {configfile}, or --list its {len(runs)} planned runs")
    if args.run not in runs:
        raise _unknown_run(args.run, runs, str(configfile))
    settings = run_settings(runs[args.run], config)
    data = "from_images" if "from_images" in settings else "from_corpus"
    known = {k: v for k, v in settings.items() if k != data}
    print(
        f"# {args.run} as planned by {configfile}: every value below is known before its data is prepared, except "
        f"`{data}`, which the prepared data decides (run.yaml records it when the run starts)"
    )
    print(yaml.safe_dump(known, sort_keys=False, default_flow_style=None, width=120), end="")
    print(yaml.safe_dump({data: settings[data]}, sort_keys=False, default_flow_style=False, width=1000), end="")
    return 0
