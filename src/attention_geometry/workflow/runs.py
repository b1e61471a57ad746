"""The training runs a workflow config asks for: each entry of `training.groups` expanded to its runs, each run's
RUN.yaml checked as the trainer checks it, and the runs whose W_qk updates are scored. Pure functions of the config
(no paths but the data folders, no catalog): the plan (workflow/plan.py) builds its runs here once, and the tests
and benchmarks/paper_cost.py expand a config's runs without a plan.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from attention_geometry.errors import ConfigError, UserError
from attention_geometry.formats.columns import RUN_KEYS
from attention_geometry.formats.rundir import run_name
from attention_geometry.training.hyper import IMAGE_OBJECTIVES, IMAGE_SIZES
from attention_geometry.training.run_config import RunConfig, run_config_from_dict, run_steps

__all__ = ["CONFIG_KEY", "Run", "expand_corpora", "data_dir", "expand_runs", "pack_runs", "select_update_runs"]


# run identity key (contract.RUN_KEYS) -> the key a run entry of the workflow config uses for it. The only
# difference: the config's `corpus` (a key of `corpora`) is the `dataset` of the tables and run names.
CONFIG_KEY: dict[str, str] = {k: ("corpus" if k == "dataset" else k) for k in RUN_KEYS}


def _as_list(value):
    return value if isinstance(value, list) else [value]


@dataclass
class Run:
    """One training run: its identity (RUN_KEYS), its RUN.yaml (`config`: a RunConfig built once by the trainer's
    own validation, training.run_config.run_config_from_dict, from its data folder, name, identity and the settings
    of its group and entry), its snapshot steps and the groups listing it."""

    name: str
    size: str
    dataset: str  # the corpus key
    objective: str
    init: str
    seed: int
    config: RunConfig
    snapshot_steps: list[int]
    groups: list[str] = field(default_factory=list)

    @property
    def spec(self) -> dict:
        return {k: getattr(self, k) for k in RUN_KEYS}

    @property
    def settings(self) -> dict:
        """The run settings its group and entry give (RUN.yaml keys of training.run_config.RUN_SETTINGS)."""
        return self.config.settings()

    @property
    def max_steps(self) -> int:
        return int(self.config.max_steps)

    @property
    def priority(self) -> int:
        """Scheduling order of training jobs: the longest first (a decoder step costs ~1.5 encoder steps on
        CPU), so that no core idles while the last long run finishes."""
        return self.max_steps * (3 if self.objective == "decoder" else 2)

    def run_config(self) -> dict:
        """The RUN.yaml content without the corpus path (the config records name the corpus by its config)."""
        return {k: v for k, v in self.config.as_mapping().items() if k != "corpus"}


def expand_corpora(corpora: Mapping) -> dict[str, dict]:
    """corpus key -> corpus config; the key is the `{dataset}` part of run names and the prepared manifest
    carries it as `name`."""
    return {key: {**c, "name": key} for key, c in corpora.items()}


def data_dir(results: str, key: str, image: bool = False) -> str:
    """The prepared folder a run trains on: {results}/corpora/KEY, or an image set's {results}/images/KEY."""
    return os.path.join(results, "images" if image else "corpora", key)


def expand_runs(
    groups: Mapping, corpora: Iterable[str], images: Iterable[str] = (), results: str = "results"
) -> tuple[dict[str, Run], dict[str, list[str]]]:
    """(run name -> Run, group -> run names). Each entry of `training.groups.G.runs` expands to the product
    of its lists; its other keys override the group's settings. A run in two groups must have the same
    settings in both. Each run's RUN.yaml is checked as the trainer checks it (run_config_from_dict: the
    hyperparameters, the steps, before any run directory exists) and its snapshot steps are resolved as the
    trainer does (run_steps). A text run's `corpus` is a key of `corpora`, its data {results}/corpora/KEY; an
    image classifier's (objective classifier, a size of IMAGE_SIZES) a key of `images`, {results}/images/KEY."""
    corpora, images = list(corpora), list(images)
    runs: dict[str, Run] = {}
    members: dict[str, list[str]] = {}
    for group, g in groups.items():
        members[group] = []
        for i, entry in enumerate(g["runs"]):
            where = f"config training.groups.{group}.runs[{i}]"
            settings = {**g["settings"], **{k: v for k, v in entry.items() if k not in CONFIG_KEY.values()}}
            for combo in itertools.product(*(_as_list(entry[CONFIG_KEY[k]]) for k in RUN_KEYS)):
                spec = dict(zip(RUN_KEYS, combo))
                _check_run_data(spec, corpora, images, where)
                name = run_name(spec["size"], spec["dataset"], spec["objective"], spec["init"], spec["seed"])
                if name in runs and runs[name].settings != settings:
                    raise ConfigError(
                        f"config training.groups.{group}: run {name} is also in group(s) "
                        f"{', '.join(runs[name].groups)} with different settings; give it another seed "
                        "or the same settings"
                    )
                if name not in runs:
                    image = spec["objective"] in IMAGE_OBJECTIVES
                    raw = {
                        "corpus": data_dir(results, spec["dataset"], image),
                        "run": name,
                        **{k: spec[k] for k in ("size", "objective", "init", "seed")},
                        **settings,
                    }
                    try:  # the trainer's own checks, before any run directory exists
                        config = run_config_from_dict(raw, where=where)
                    except UserError as exc:
                        raise ConfigError(str(exc)) from None
                    steps = run_steps(config, config.max_steps, where)[0]
                    runs[name] = Run(name=name, **spec, config=config, snapshot_steps=steps)
                if group not in runs[name].groups:
                    runs[name].groups.append(group)
                if name not in members[group]:
                    members[group].append(name)
    return runs, members


def _check_run_data(spec: Mapping, corpora: list[str], images: list[str], where: str) -> None:
    """A run's data key names the right kind of data for its objective, and its size fits the objective."""
    image = spec["objective"] in IMAGE_OBJECTIVES
    if image != (spec["size"] in IMAGE_SIZES):
        kind = "an image size (" + ", ".join(IMAGE_SIZES) + ")" if image else "a text size"
        raise ConfigError(f"{where}: objective {spec['objective']!r} needs {kind}, not {spec['size']!r}")
    keys, section = (images, "images") if image else (corpora, "corpora")
    if spec["dataset"] not in keys:
        raise ConfigError(
            f"{where}: corpus {spec['dataset']!r} is not a key of config {section} ({', '.join(keys) or 'none'})"
            + (" (an image classifier trains on an image set)" if image else "")
        )


def select_update_runs(runs: Mapping[str, Run], groups: Mapping[str, list[str]], updates: Mapping) -> list[str]:
    """The runs of `updates.group` with an init in `updates.inits`; each must have a snapshot at every step
    of `updates.steps`."""
    selected = [
        r
        for r in groups[updates["group"]]
        if runs[r].init in updates["inits"] and runs[r].objective not in IMAGE_OBJECTIVES
    ]
    if not selected:
        raise ConfigError(f"config updates: group {updates['group']!r} has no run with init in {updates['inits']}")
    for r in selected:
        bad = [s for s in updates["steps"] if s not in runs[r].snapshot_steps]
        if bad:
            raise ConfigError(
                f"config updates.steps: {bad} are not snapshot steps of run {r} "
                f"(snapshots at {runs[r].snapshot_steps[:8]}...)"
            )
    return selected


def pack_runs(runs: Mapping[str, Run], runs_per_job: Mapping[str, int] | None, gpus: int, nodes: int) -> dict:
    """pack name -> run names, for config training.runs_per_job (model size -> runs trained at once in one job):
    the runs of each such size, longest first (Run.priority, then name), in packs of that many, named
    '{size}-pack{i}' from 0 (the last pack may be smaller). Sizes with 1 (or not listed) are not packed: rule
    train_model trains each of their runs alone. A size no run has, or packing with several GPUs or nodes per job
    (train-shared starts plain processes on one device), is a ConfigError."""
    wanted = {size: int(n) for size, n in (runs_per_job or {}).items() if int(n) > 1}
    if not wanted:
        return {}
    sizes = sorted({r.size for r in runs.values()})
    unknown = sorted(set(wanted) - set(sizes))
    if unknown:
        raise ConfigError(
            f"config training.runs_per_job: no run has size {unknown[0]!r} (the runs' sizes: {', '.join(sizes)})"
        )
    if gpus > 1 or nodes > 1:
        raise ConfigError(
            f"config training.runs_per_job: packs several runs into one job on one device, which needs gpus <= 1 "
            f"and nodes 1 (here gpus {gpus}, nodes {nodes})"
        )
    packs = {}
    for size, n in sorted(wanted.items()):
        names = sorted((name for name, r in runs.items() if r.size == size), key=lambda x: (-runs[x].priority, x))
        for i in range(0, len(names), n):
            packs[f"{size}-pack{i // n}"] = names[i : i + n]
    return packs
