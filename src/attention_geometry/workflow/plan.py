"""The workflow's logic: everything rules/*.smk derive from the validated config, in one testable place.

`plan(config, repo)` reads the config once (at Snakemake's parse time) and returns a `Plan`:

    corpora      corpus key -> the corpus config given to `attention-geometry prepare-corpus`
    images       image set key -> the config given to `attention-geometry prepare-images` (the ViT runs' data)
    runs         run name -> Run (its identity, its RUN.yaml as a validated RunConfig: the group's settings
                 merged with the entry's, its snapshot steps, its groups)
    groups       group name -> run names, in config order
    update_runs  the runs whose W_qk updates are scored (`updates.group` x `updates.inits`)
    pretrained   model key -> Pretrained (where the files are, the CLI arguments, the pinned revision); a hub
                 model is scored offline from {results}/hub-qk/{key}/, its q/k subset (rule prefetch_qk)
    prefetched   the keys of those hub models (prefetched_on_cluster: those whose q/k subset is too large for
                 the submitting host, config scoring.prefetch_local_max_gb)
    catalog      notebooks/catalog.yaml; `notebooks` the entries made with this config (not in figures.skip,
                 and with every required input made: CONDITIONAL_PLACEHOLDERS)
    updates      config `updates` (Updates: the update runs' group and inits, the steps and batches scored)
    baseline_init, intervals   the baseline init and the bootstrap intervals' settings of config `figures`
    provenance_table           whether the run provenance table is made (config training.provenance_table)
    jobs         how the jobs run (workflow.jobs.Jobs: resources, SLURM, the trainer's launch and device, offline)

and answers the rules' questions (paths, the emergence and ablation runs, every notebook's papermill
parameters and dependencies). The rules only look things up here: they read no config key. A config that passes
the schema but not a cross-key check raises ConfigError (rules/common.smk turns it into Snakemake's WorkflowError).

No torch, no pandas, no Snakemake: the tests call it directly (tests/test_workflow_logic.py). The runs' expansion
is workflow/runs.py, the jobs' settings workflow/jobs.py: both pure functions of the config, which the plan calls once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import yaml

from attention_geometry.analysis.study_design import (
    ABLATION,
    APPLIED,
    BASELINE,
    EMERGENCE,
    EMERGENCE_OBJECTIVES,
    NAMED,
    REQUIRED_EMERGENCE,
    UPDATES,
    VISION_RUNS,
    Arm,
    designed,
)
from attention_geometry.errors import ConfigError, UserError
from attention_geometry.formats.checkout import code_version
from attention_geometry.formats.files import csv_text, read_yaml
from attention_geometry.formats.rundir import snapshot_dir
from attention_geometry.formats.value_kinds import unknown_key
from attention_geometry.training.hyper import IMAGE_OBJECTIVES, resolve_hyper
from attention_geometry.training.run_config import run_steps
from attention_geometry.workflow.jobs import jobs
from attention_geometry.workflow.pretrained import (
    PRETRAINED_COLUMNS,
    pretrained_rows,
    resolve_pretrained,
)
from attention_geometry.workflow.runs import data_dir, expand_corpora, expand_runs, pack_runs, select_update_runs

__all__ = [
    "CONDITIONAL_PLACEHOLDERS",
    "NULL_INITS",
    "Updates",
    "Intervals",
    "Plan",
    "plan",
    "schema_error",
    "load_catalog",
    "yaml_text",
]


# params of notebooks/catalog.yaml that are config keys of `figures` but never handed to a notebook
_NOT_NOTEBOOK_PARAMS = (
    "skip",
    "fig1_models",
    "emergence_group",
    "ablation_group",
    "vision_group",
    "null_samples",
    "gqa_models",
)


# the inits of the random-init null table (Plan.null_inits: rule score_null_inits's --inits), the same as the
# scorer's default (scoring.random_init_null.NULL_INITS, which imports torch)
NULL_INITS = ("standard", "symmetric-fresh", "fresh")


# placeholders of notebooks/catalog.yaml whose file only some configs make -> why a config does not. An entry with
# an input on one of them is made only where the file is, unless the entry lists that input under `optional`:
# then the input is left out of its papermill parameters and dependencies (the notebook reads it with
# inputs.get) and the entry is made either way.
CONDITIONAL_PLACEHOLDERS = {"gqa_table": "config figures.gqa_models is empty"}


# ------------------------------------------------------------------------------- typed config sections
@dataclass(frozen=True)
class Updates:
    """Config `updates`: the group and inits whose runs' W_qk updates are scored (Plan.update_runs), at which
    snapshot steps, in config order, and over how many batches (rule score_updates's --steps and --batches)."""

    group: str
    inits: tuple[str, ...]
    steps: tuple[int, ...]
    batches: int


@dataclass(frozen=True)
class Intervals:
    """How config `figures` draws a bootstrap interval (rule tabulate_symmetry_speedup's --ci-level,
    --bootstrap-resamples and --bootstrap-seed): ci_level, bootstrap_resamples, bootstrap_seed."""

    level: float
    resamples: int
    seed: int


# ------------------------------------------------------------------------------------------- notebooks
def load_catalog(path: str) -> dict[str, dict]:
    """notebooks/catalog.yaml: notebook entry -> {caption, inputs, outputs, params[, notebook, constants]}."""
    catalog = read_yaml(path, "notebook catalog", error=ConfigError)
    if not isinstance(catalog, dict):
        raise ConfigError(f"{path}: expected a mapping of notebook entries")
    for name, entry in catalog.items():
        clash = sorted(set(entry.get("constants", {})) & set(entry.get("params", [])))
        if clash:
            raise ConfigError(f"{path} {name}: {clash} both a param and a constant")
        stray = sorted(set(entry.get("optional", [])) - set(entry.get("inputs", {})))
        if stray:
            raise ConfigError(f"{path} {name}: optional {stray} not among its inputs")
    return catalog


def notebook_file(catalog: Mapping, entry: str) -> str:
    """The notebook an entry executes, relative to the repository: notebooks/{notebook or entry}.ipynb."""
    return os.path.join("notebooks", f"{catalog[entry].get('notebook', entry)}.ipynb")


# --------------------------------------------------------------------------------------- small writers
def yaml_text(data) -> str:
    return yaml.safe_dump(data, sort_keys=True)


def alternation(names: Iterable[str]) -> str:
    """A wildcard constraint matching exactly `names` (none: matches nothing)."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


# ------------------------------------------------------------------------------------------------ plan
class Plan:
    """Everything the rules look up, derived once from the validated config (see the module docstring)."""

    def __init__(
        self,
        config: Mapping,
        repo: str,
        configfiles: Sequence[str] = (),
    ):
        self.config = config
        self.repo = repo
        self.results = os.path.normpath(config["results"])
        self.configfiles = [str(p) for p in configfiles]
        self.corpora = expand_corpora(config["corpora"])
        self.images = expand_corpora(config.get("images") or {})  # image set key -> prepare-images config
        self.runs, self.groups = expand_runs(config["training"]["groups"], self.corpora, self.images, self.results)
        f = config["figures"]
        vision = [f["vision_group"]] if f.get("vision_group") else []
        for group in (config["updates"]["group"], f["emergence_group"], f["ablation_group"], *vision):
            if group not in self.groups:
                raise ConfigError(f"config: group {group!r} is not a key of training.groups ({', '.join(self.groups)})")
        self.update_runs = select_update_runs(self.runs, self.groups, config["updates"])
        self.pretrained = resolve_pretrained(
            config["pretrained"], self.res("hub-qk"), joined_dir=self.res("pretrained", "files")
        )
        self.prefetched = [k for k, m in self.pretrained.items() if m.hub_id]  # rules prefetch_qk*'s models
        # very large q/k subsets are fetched by a cluster job, not on the submitting host
        limit = config["scoring"].get("prefetch_local_max_gb", 10)
        self.prefetched_on_cluster = [k for k in self.prefetched if self.pretrained[k].qk_gb > limit]
        self.catalog = load_catalog(os.path.join(repo, "notebooks", "catalog.yaml"))
        for nb in f["skip"]:
            if nb not in self.catalog:
                raise ConfigError(f"config figures.skip: {nb!r} is not a notebook of notebooks/catalog.yaml")
        # the entries made with this config: not skipped, and every required input made (CONDITIONAL_PLACEHOLDERS)
        self.notebooks = [nb for nb in self.catalog if nb not in f["skip"] and self.entry_made(nb)]
        u = config["updates"]
        self.updates = Updates(u["group"], tuple(u["inits"]), tuple(u["steps"]), u["batches"])
        self.baseline_init = f["baseline_init"]
        self.intervals = Intervals(f["ci_level"], f["bootstrap_resamples"], f["bootstrap_seed"])
        self.provenance_table = config["training"]["provenance_table"]
        self.jobs = jobs(config)  # resources, SLURM, the trainer's launch and device, the hub offline
        t = config["training"]
        # pack -> runs trained at once in one job (training.runs_per_job; rules train_pack_*), run -> its pack
        self.packs = pack_runs(self.runs, t.get("runs_per_job"), int(t.get("gpus", 0)), int(t.get("nodes", 1)))
        self.packed = {run: pack for pack, names in self.packs.items() for run in names}
        self.config_hash = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
        self._inputs: dict[str, str] = {}  # corpus -> corpus_inputs(corpus), computed when first asked for

    # ---------------------------------------------------------------- paths
    def res(self, *parts: str) -> str:
        """A path under the results root (config key `results`)."""
        return os.path.join(self.results, *parts)

    def corpus_dir(self, corpus: str) -> str:
        return data_dir(self.results, corpus)

    def image_dir(self, images: str) -> str:
        return data_dir(self.results, images, image=True)

    def is_image_run(self, run: str) -> bool:
        return self.runs[run].objective in IMAGE_OBJECTIVES

    def run_corpus(self, run: str) -> str:
        """The prepared corpus folder a run trains on (for an image classifier, its prepared image set)."""
        return self.runs[run].config.corpus

    def run_yaml(self, run: str) -> str:
        """The text of a run's RUN.yaml (rule write_run_config), from its RunConfig: the keys the config gave."""
        return yaml_text(self.runs[run].config.as_mapping())

    def corpus_inputs(self, corpus: str) -> str:
        """`path sha256` lines of the local input files corpus `corpus` reads (data.sources.input_fingerprint):
        a parameter of the corpus rule, so input text that changed re-runs it (Snakemake re-runs a job whose
        parameters changed) instead of answering "nothing to do"."""
        if corpus not in self._inputs:
            from attention_geometry.data.corpus_config import corpus_config_from_dict
            from attention_geometry.data.sources import input_fingerprint

            try:
                cfg = corpus_config_from_dict(self.corpora[corpus], where=f"config corpora.{corpus}")
                self._inputs[corpus] = "\n".join(input_fingerprint(cfg))
            except UserError as exc:  # the rule runs and prepare-corpus reports it
                self._inputs[corpus] = f"unreadable: {exc}"
        return self._inputs[corpus]

    def run_dir(self, run: str) -> str:
        return self.res("runs", run)

    def train_done(self, run: str) -> str:
        """The marker that training of `run` finished (the train rule's only declared output)."""
        return self.res("runs", run, "train.done")

    def unpacked_runs(self) -> list[str]:
        """The runs rule train_model trains, one per job: those in no pack (training.runs_per_job)."""
        return [r for r in self.runs if r not in self.packed]

    def final_snapshot(self, run: str) -> str:
        return str(snapshot_dir(self.run_dir(run), self.runs[run].max_steps))

    def run_wqk(self, run: str) -> str:
        """Figure 1's matrix of a run's final snapshot (rule extract_run_wqk)."""
        return self.res("figdata", "wqk", "runs", f"{run}.npz")

    def pretrained_wqk(self, model: str) -> str:
        """Figure 1's matrix of a pretrained model (rule extract_pretrained_wqk)."""
        return self.res("figdata", "wqk", "pretrained", f"{model}.npz")

    def pretrained_models_csv(self) -> str:
        """{results}/tables/pretrained_models.csv: where each model's files came from."""
        return csv_text(pretrained_rows(self.pretrained), PRETRAINED_COLUMNS)

    # ---------------------------------------------------------------- runs the figures draw
    def emergence_runs(self) -> dict[str, list[str]]:
        """{objective: [run, ...]}: the baseline-init runs of the emergence group per objective of the claims'
        emergence arms (analysis.study_design.EMERGENCE_OBJECTIVES: encoder and decoder always, decoder-paper where
        the group has it), every seed; the required ones sorted by seed (seeds are the unit of every claim; encoder
        and decoder of one seed share their initial weights)."""
        f = self.config["figures"]
        out: dict[str, list[str]] = {o: [] for o in REQUIRED_EMERGENCE}
        for run in self.groups[f["emergence_group"]]:
            objective = self.runs[run].objective
            if self.runs[run].init == f["baseline_init"] and objective in EMERGENCE_OBJECTIVES:
                out.setdefault(objective, []).append(run)
        for objective in REQUIRED_EMERGENCE:  # the others are optional arms
            runs = out[objective]
            if not runs:
                raise ConfigError(
                    f"config figures.emergence_group {f['emergence_group']!r} has no {objective} run "
                    f"with init {f['baseline_init']!r}"
                )
            runs.sort(key=lambda r: self.runs[r].seed)
        return out

    def tokens_per_step(self) -> dict[str, int]:
        """{run: the tokens one update trains on} of the emergence runs: batch_size x seq_len (seq_len None: the
        corpus's block_len), padding included. The figures draw our curves and the paper's at equal tokens
        (analysis.figure_frames.PAPER_TOKENS_PER_STEP for the paper's)."""
        from attention_geometry.data.corpus_config import corpus_config_from_dict

        out = {}
        for run in (r for runs in self.emergence_runs().values() for r in runs):
            spec = self.runs[run]
            h = resolve_hyper(spec.size, spec.config.overrides)
            seq_len = h.seq_len
            if seq_len is None:
                corpus = corpus_config_from_dict(self.corpora[spec.dataset], where=f"config corpora.{spec.dataset}")
                seq_len = corpus.block_len
            out[run] = int(h.batch_size) * int(seq_len)
        return out

    def ablation_runs(self) -> list[str]:
        return list(self.groups[self.config["figures"]["ablation_group"]])

    def vision_runs(self) -> list[str]:
        """The ViT runs of `figures.vision_group` (every init and seed; none when the key is absent), the runs
        of the vision claims, Figure S1's trained points and the vision training figure."""
        group = self.config["figures"].get("vision_group")
        runs = list(self.groups[group]) if group else []
        text = [r for r in runs if not self.is_image_run(r)]
        if text:
            raise ConfigError(f"config figures.vision_group {group!r}: {text[0]} is not an image classifier run")
        return runs

    def null_source_run(self) -> str:
        """The run whose shape (size, overrides, corpus) the random-init null table copies: the lowest-seed
        baseline-init encoder run of the emergence group."""
        return self.emergence_runs()["encoder"][0]

    def null_inits(self) -> list[str]:
        """The inits of the random-init null table, in order (NULL_INITS): rule score_null_inits's --inits, and
        the inits expected_tables expects in null_scores."""
        return list(NULL_INITS)

    def null_samples(self) -> int:
        """The untrained models per init of the null table (config figures.null_samples, 100 when absent): rule
        score_null_inits's --samples, and the samples expected_tables expects in null_scores."""
        return int(self.config["figures"].get("null_samples", 100))

    def gqa_models(self) -> list[str]:
        """The pretrained keys scored also by the paper's grouped-query expansion (config figures.gqa_models)."""
        keys = list(self.config["figures"].get("gqa_models", []))
        for key in keys:
            if key not in self.pretrained:
                raise ConfigError(f"config figures.gqa_models: {key!r} is not a key of config pretrained")
        return keys

    def gqa_table(self) -> str:
        """{results}/tables/gqa_paper_method.csv: per grouped-query layer, the scores both ways (rule concat_gqa)."""
        return self.res("tables", "gqa_paper_method.csv")

    def fig1_model(self, role: str) -> str:
        """The pretrained model key drawn as Figure 1's `role` (encoder | decoder)."""
        key = self.config["figures"]["fig1_models"][role]
        if key not in self.pretrained:
            raise ConfigError(f"config figures.fig1_models.{role}: {key!r} is not a key of config pretrained")
        return key

    # ---------------------------------------------------------------- what the claims' tables must hold
    def num_layers(self, run: str) -> int:
        r = self.runs[run]
        return resolve_hyper(r.size, r.config.overrides).num_layers

    def eval_steps(self, run: str) -> list[int]:
        """The steps at which a run evaluates its held-out loss (rundir.snapshot_steps, as the trainer resolves
        them: 0 and max_steps always); none with eval_blocks 0."""
        config = self.runs[run].config
        if config.eval_blocks == 0:
            return []
        return run_steps(config, config.max_steps)[1]

    def expected_tables(self) -> dict[str, list[dict]]:
        """The rows each tidy table the claims read must hold (analysis.completeness: table kind -> blocks, each
        block the product of its key values; runs with the same steps and layers share a block):
        training_scores, every run's snapshot steps x layers (head "all"); training_loss, every run's held-out
        evaluation steps; update_scores, the update runs x updates.steps x layers x kind (no `applied` row at a
        run's last snapshot, which has no next one); null_scores, the null's size x NULL_INITS x
        figures.null_samples samples (seeds the scorer chooses: a count) x layers."""

        def blocks(rows: Iterable[tuple[str, dict]]) -> list[dict]:
            merged: dict[str, dict] = {}
            for run, values in rows:
                if any(not v for v in values.values()):
                    continue
                block = merged.setdefault(json.dumps(values, sort_keys=True), {"run": [], **values})
                block["run"].append(run)
            return list(merged.values())

        layers = {r: list(range(self.num_layers(r))) for r in self.runs}
        updates = self.config["updates"]
        steps = sorted(set(int(s) for s in updates["steps"]))

        def update_rows(kind: str):
            for r in self.update_runs:
                last = self.runs[r].snapshot_steps[-1]
                mine = [s for s in steps if kind == "gradient" or s < last]
                yield r, {"step": mine, "layer": layers[r], "kind": [kind]}

        source = self.null_source_run()
        return {
            "training_scores": blocks(
                (r, {"step": self.runs[r].snapshot_steps, "layer": layers[r]}) for r in self.runs
            ),
            "training_loss": blocks((r, {"step": self.eval_steps(r)}) for r in self.runs),
            "update_scores": blocks(update_rows("gradient")) + blocks(update_rows("applied")),
            "null_scores": [
                {
                    "size": [self.runs[source].size],
                    "init": self.null_inits(),
                    "sample": self.null_samples(),
                    "layer": layers[source],
                }
            ],
        }

    def design_claims(self) -> list[str]:
        """The claims (analysis.claims ids) this config's design includes, each of which must come out tested
        (the report stops when one is "not tested", instead of dropping it from its Holm family): derived from
        each claim's declared arms (analysis.study_design.CLAIM_DESIGN), those whose arms the groups have, with
        at least one seed paired where the claim pairs runs by seed. The pretrained claims (g*) and the per-layer
        rows are not listed: the models scored, and each model's layers, decide them."""
        f = self.config["figures"]
        base = f["baseline_init"]
        emergence = [r for runs in self.emergence_runs().values() for r in runs]
        updated = set(self.update_runs)
        selections = {
            EMERGENCE: emergence,
            ABLATION: self.ablation_runs(),
            VISION_RUNS: self.vision_runs(),
            UPDATES: [r for r in emergence if r in updated],
        }

        def units(selection: str, arm: Arm) -> set:
            init = base if arm.init == BASELINE else arm.init
            return {
                (self.runs[r].size, self.runs[r].dataset, self.runs[r].seed)
                for r in selections[selection]
                if self.runs[r].objective == arm.objective and self.runs[r].init == init
            }

        named = {str(i) for ids in (f.get("claim_families") or {}).values() for i in ids or []}
        applied = any(s < self.runs[r].snapshot_steps[-1] for r in updated for s in self.config["updates"]["steps"])
        return designed(units, {NAMED: lambda cid: cid in named, APPLIED: lambda cid: applied})

    # ---------------------------------------------------------------- notebooks
    def placeholders(self) -> dict[str, Callable[[], tuple[str, str | None]]]:
        """Catalog placeholder -> () -> (path given to the notebook, file the rule depends on), evaluated
        only where an entry uses it; a placeholder of CONDITIONAL_PLACEHOLDERS gives None where this config does
        not make its file."""

        def manifest():  # the committed record of the manifest (rule record_corpus), not the ignored corpus
            return same(self.corpus_record(self.runs[self.emergence_runs()["encoder"][0]].dataset))

        def same(path):
            return path, path

        return {
            "results": lambda: (self.results, None),
            "fig1_encoder_run": lambda: same(self.run_wqk(self.emergence_runs()["encoder"][0])),
            "fig1_decoder_run": lambda: same(self.run_wqk(self.emergence_runs()["decoder"][0])),
            "fig1_encoder_model": lambda: same(self.pretrained_wqk(self.fig1_model("encoder"))),
            "fig1_decoder_model": lambda: same(self.pretrained_wqk(self.fig1_model("decoder"))),
            "corpus_manifest": manifest,
            # the grouped-query models scored both ways (rule concat_gqa): only with figures.gqa_models
            "gqa_table": lambda: same(self.gqa_table()) if self.gqa_models() else None,
        }

    def absent_inputs(self, notebook: str) -> dict[str, str]:
        """Input key -> why it is not made with this config, for the inputs of an entry on a placeholder of
        CONDITIONAL_PLACEHOLDERS whose file this config does not make (only those placeholders are evaluated)."""
        known, out = self.placeholders(), {}
        for key, template in self.catalog[notebook].get("inputs", {}).items():
            for name in re.findall(r"\{([^{}]*)\}", template):
                if name in CONDITIONAL_PLACEHOLDERS and known[name]() is None:
                    out[key] = f"{{{name}}} is not made ({CONDITIONAL_PLACEHOLDERS[name]})"
        return out

    def entry_made(self, notebook: str) -> bool:
        """Whether this config makes catalog entry `notebook` (figures.skip aside): every input not listed under
        the entry's `optional` is made."""
        return not set(self.absent_inputs(notebook)) - set(self.catalog[notebook].get("optional", []))

    def corpus_record(self, corpus: str) -> str:
        """{results}/tables/corpus_{corpus}.csv: the facts of a prepared corpus the notebooks cite (rule
        record_corpus), committed with the tables so that no notebook depends on the ignored corpus."""
        return self.res("tables", f"corpus_{corpus}.csv")

    def notebook_param(self, name: str, notebook: str):
        f = self.config["figures"]
        if name == "emergence_runs":
            return self.emergence_runs()
        if name == "tokens_per_step":
            return self.tokens_per_step()
        if name == "ablation_runs":
            return self.ablation_runs()
        if name == "vision_runs":
            return self.vision_runs()
        if name == "config_hash":
            return self.config_hash
        if name == "expected_tables":
            return self.expected_tables()
        if name == "design_claims":
            return self.design_claims()
        if name == "code_version":
            return code_version(self.repo)
        if name == "config_name":
            return ", ".join(os.path.relpath(p, self.repo) for p in self.configfiles) or "config/config.yaml"
        if name in f and name not in _NOT_NOTEBOOK_PARAMS:
            return f[name]
        raise ConfigError(f"notebooks/catalog.yaml {notebook}: unknown param {name!r} (no config figures.{name})")

    def notebook_io(self, notebook: str) -> tuple[dict, dict[str, str], dict[str, str]]:
        """(papermill parameters {inputs, outputs, params}, the rule's inputs {key: file}, the rule's outputs
        {key: file}) of one catalog entry. A placeholder is replaced as a whole path prefix, so
        `{results}/tables/x.csv` works too; an input that is exactly one placeholder depends on that
        placeholder's file. An input on a placeholder this config does not make (CONDITIONAL_PLACEHOLDERS) is left
        out when the entry lists it under `optional`; otherwise the entry is not made (ConfigError)."""
        entry = self.catalog[notebook]
        absent = self.absent_inputs(notebook)
        optional = set(entry.get("optional", []))
        for key, why in absent.items():
            if key not in optional:
                raise ConfigError(f"notebooks/catalog.yaml {notebook}: not made with this config: input {key}: {why}")
        known = self.placeholders()
        used: dict[str, tuple[str, str | None]] = {}

        def fill(template: str) -> str:
            for key in re.findall(r"\{([^{}]*)\}", template):
                if key not in known:
                    raise ConfigError(f"notebooks/catalog.yaml {notebook}: unknown placeholder in {template!r}")
                if key not in used:
                    used[key] = known[key]()
                template = template.replace(f"{{{key}}}", used[key][0])
            if "{" in template or "}" in template:
                raise ConfigError(f"notebooks/catalog.yaml {notebook}: unknown placeholder in {template!r}")
            return template

        inputs, deps = {}, {}
        for key, template in entry.get("inputs", {}).items():
            if key in absent:
                continue
            inputs[key] = fill(template)
            whole = re.fullmatch(r"\{([^{}]*)\}", template.strip())
            dep = used[whole.group(1)][1] if whole and whole.group(1) != "results" else inputs[key]
            if dep is not None:
                deps[key] = dep
        outputs = {key: fill(t) for key, t in entry["outputs"].items()}
        params = {name: self.notebook_param(name, notebook) for name in entry.get("params", [])}
        params.update(entry.get("constants", {}))
        return {"inputs": inputs, "outputs": outputs, "params": params}, deps, outputs

    def notebook_targets(self) -> list[str]:
        """Every notebook's outputs and the tables under {results}/tables that the notebooks read (a table a
        rule makes for one figure is a result too): only committed files, so a fresh clone has every target
        (the executed notebook is a side file of the rule; the report captions are committed under report/captions/)."""
        targets = []
        tables = self.res("tables") + os.sep
        for nb in self.notebooks:
            _, deps, outputs = self.notebook_io(nb)
            targets += list(outputs.values())
            targets += [d for d in deps.values() if d.startswith(tables)]
        return list(dict.fromkeys(targets))


def schema_error(config: Mapping, schema_path: str, limit: int = 300) -> str | None:
    """The first way `config` fails config/schema.yaml as one line, `config KEY.PATH: message` (the message
    cut to `limit` characters), or None when it passes. The Snakefile shows this instead of Snakemake's
    validation error, which prints the whole schema and config after the message."""
    import jsonschema

    schema = read_yaml(schema_path, "config schema", ConfigError)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    errors = list(cls(schema).iter_errors(config))
    if not errors:
        return None
    # an unknown key, at any depth, is named with the closest known one: a typo (`max_step:`) otherwise shows as
    # the required key it hides ("'max_steps' is a required property"), elsewhere in the schema's error tree
    unknown = [u for e in _all_errors(errors) if (u := _unknown_key(e, schema)) is not None]
    if unknown:
        path, key, known = min(unknown, key=lambda u: len(u[0]))
        return f"config {_where(path) or '(top level)'}: {unknown_key(key, known)}"
    error = jsonschema.exceptions.best_match(errors)
    message = " ".join(error.message.split())
    if len(message) > limit:
        message = message[:limit] + " ..."
    return f"config {_where(error.absolute_path) or '(top level)'}: {message}"


def _where(path) -> str:
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in path).replace(".[", "[")


def _all_errors(errors):
    """Every error of a jsonschema error tree (the errors of anyOf / oneOf branches included)."""
    for e in errors:
        yield e
        yield from _all_errors(e.context or [])


def _unknown_key(error, root: Mapping) -> tuple[tuple, str, list[str]] | None:
    """(path, the first unknown key, the known keys) of an additionalProperties or unevaluatedProperties error, else
    None. The known keys are the object's properties and those of a local $ref it takes them from."""
    if error.validator not in ("additionalProperties", "unevaluatedProperties"):
        return None
    if not isinstance(error.instance, Mapping):
        return None
    known = list((error.schema.get("properties") or {}).keys())
    ref = error.schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: object = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        known += [k for k in ((target or {}).get("properties") or {}) if k not in known]
    patterns = list((error.schema.get("patternProperties") or {}).keys())
    extra = [k for k in error.instance if k not in known and not any(re.search(p, str(k)) for p in patterns)]
    return (tuple(error.absolute_path), str(extra[0]), known) if extra else None


# ------------------------------------------------------------------------------ report and committed facts
def caption_rst(catalog: Mapping, entry: str) -> str:
    """report/captions/{entry}.rst (committed; tests/test_report.py checks them against the catalog): the
    entry's caption and the notebook and rule that make it."""
    return (
        f"{' '.join(catalog[entry]['caption'].split())}\n\n"
        f"Made by ``{notebook_file(catalog, entry)}`` (rule ``make_{entry}``).\n"
    )


def plan(config: Mapping, repo: str, configfiles: Sequence[str] = ()) -> Plan:
    """The workflow's plan for a validated config (see Plan); ConfigError on keys that disagree."""
    return Plan(config, repo, configfiles)
