# Helpers shared by the rule files and the wildcard constraints; no rules here.
#
# Everything is derived from the validated config once, at parse time:
#   CORPORA   corpus key -> corpus config (the dict given to `attention-geometry prepare-corpus`)
#   RUNS      run name -> {"spec": size/corpus/objective/init/seed, "settings": steps..., "groups": [...]}
#   GROUPS    group name -> run names (in config order)
#   PRETRAINED  model key -> {"source", "inputs", "args", "revision", "pinned", ...}
#   CATALOG   notebooks/catalog.yaml (one entry per figure/table notebook)
import csv
import hashlib
import importlib.util
import io
import itertools
import json
import os
import re
import shlex

import yaml
from snakemake.exceptions import WorkflowError

RESULTS = os.path.normpath(config["results"])
REPO = workflow.basedir

if config["offline"]:
    # Nothing waits on the Hugging Face hub: every job inherits these (local and SLURM jobs alike, since
    # each job re-parses this file).
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def res(*parts):
    """A path under the results root (config key `results`)."""
    return os.path.join(RESULTS, *parts)


def _as_list(value):
    return value if isinstance(value, list) else [value]


def _alternation(names):
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


# ---------------------------------------------------------------- corpora
CORPORA = {}
for _key, _corpus in config["corpora"].items():
    # the corpus key is the `{dataset}` part of run names; the prepared manifest carries it as `name`
    CORPORA[_key] = {**_corpus, "name": _key}


def corpus_dir(corpus):
    return res("corpora", corpus)


# ---------------------------------------------------------------- training runs
RUN_KEYS = ("size", "corpus", "objective", "init", "seed")


def run_name(spec):
    return "{size}-{corpus}-{objective}-{init}-s{seed}".format(**spec)


RUNS = {}
GROUPS = {}
for _group, _g in config["training"]["groups"].items():
    GROUPS[_group] = []
    for _i, _entry in enumerate(_g["runs"]):
        _extra = {k: v for k, v in _entry.items() if k not in RUN_KEYS}
        _settings = {**_g["settings"], **_extra}
        for _combo in itertools.product(*(_as_list(_entry[k]) for k in RUN_KEYS)):
            _spec = dict(zip(RUN_KEYS, _combo))
            if _spec["corpus"] not in CORPORA:
                raise WorkflowError(
                    f"config training.groups.{_group}.runs[{_i}]: corpus {_spec['corpus']!r} "
                    f"is not a key of config corpora ({', '.join(CORPORA)})"
                )
            _name = run_name(_spec)
            if _name in RUNS and RUNS[_name]["settings"] != _settings:
                raise WorkflowError(
                    f"config training.groups.{_group}: run {_name} is also in group(s) "
                    f"{', '.join(RUNS[_name]['groups'])} with different settings; give it another seed "
                    "or the same settings"
                )
            RUNS.setdefault(_name, {"spec": _spec, "settings": _settings, "groups": []})
            if _group not in RUNS[_name]["groups"]:
                RUNS[_name]["groups"].append(_group)
            if _name not in GROUPS[_group]:
                GROUPS[_group].append(_name)


def run_dir(run):
    return res("runs", run)


def train_done(run):
    """The marker that training of `run` finished (the train rule's only declared output)."""
    return res("runs", run, "train.done")


def snapshot_steps(run):
    s = RUNS[run]["settings"]
    if "snapshot_steps" in s:
        return sorted(set(int(x) for x in s["snapshot_steps"]) | {0, int(s["max_steps"])})
    every = int(s["snapshot_every"])
    return sorted(set(range(0, int(s["max_steps"]) + 1, every)) | {int(s["max_steps"])})


def train_priority(run):
    """Scheduling order of training jobs: the longest first (a decoder step costs ~1.5 encoder steps on
    CPU), so that no core idles while the last long run finishes."""
    spec, settings = RUNS[run]["spec"], RUNS[run]["settings"]
    return int(settings["max_steps"]) * (3 if spec["objective"] == "decoder" else 2)


def final_snapshot(run):
    return os.path.join(run_dir(run), "checkpoints", f"step-{int(RUNS[run]['settings']['max_steps']):07d}")


def run_config(run):
    """The RUN.yaml content of `run` (without the corpus path, which comes from the rule's input)."""
    spec = RUNS[run]["spec"]
    cfg = {"run": run, **{k: spec[k] for k in ("size", "objective", "init", "seed")}}
    cfg.update(RUNS[run]["settings"])
    return cfg


for _group in (config["updates"]["group"], config["figures"]["emergence_group"], config["figures"]["ablation_group"]):
    if _group not in GROUPS:
        raise WorkflowError(f"config: group {_group!r} is not a key of training.groups ({', '.join(GROUPS)})")

UPDATE_RUNS = [r for r in GROUPS[config["updates"]["group"]] if RUNS[r]["spec"]["init"] in config["updates"]["inits"]]
if not UPDATE_RUNS:
    raise WorkflowError(
        f"config updates: group {config['updates']['group']!r} has no run with init in {config['updates']['inits']}"
    )
for _run in UPDATE_RUNS:
    _bad = [s for s in config["updates"]["steps"] if s not in snapshot_steps(_run)]
    if _bad:
        raise WorkflowError(
            f"config updates.steps: {_bad} are not snapshot steps of run {_run} "
            f"(snapshots at {snapshot_steps(_run)[:8]}...)"
        )


def emergence_runs():
    """{objective: [run, ...]}: the baseline-init runs of the emergence group per objective, every seed, sorted
    by seed (seeds are the unit of every claim; encoder and decoder of one seed share their initial weights)."""
    out = {"encoder": [], "decoder": []}
    base = config["figures"]["baseline_init"]
    for run in GROUPS[config["figures"]["emergence_group"]]:
        spec = RUNS[run]["spec"]
        if spec["init"] == base:
            out[spec["objective"]].append(run)
    for objective, runs in out.items():
        if not runs:
            raise WorkflowError(
                f"config figures.emergence_group {config['figures']['emergence_group']!r} has no "
                f"{objective} run with init {base!r}"
            )
        runs.sort(key=lambda r: RUNS[r]["spec"]["seed"])
    return out


def null_source_run():
    """The run whose shape (size, overrides, corpus) the random-init null table copies: the lowest-seed
    baseline-init encoder run of the emergence group."""
    return emergence_runs()["encoder"][0]


# ---------------------------------------------------------------- pretrained models
def _package_dir(package, where):
    spec = importlib.util.find_spec(package)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise WorkflowError(
            f"config {where}: Python package {package!r} is not installed (it ships the model files; "
            "`make setup` installs it)"
        )
    return list(spec.submodule_search_locations)[0]


PRETRAINED = {}
for _key, _m in config["pretrained"].items():
    _where = f"pretrained.{_key}"
    _sources = [k for k in ("package", "path", "hub_id") if k in _m]
    if len(_sources) != 1:
        raise WorkflowError(f"config {_where}: give exactly one of package, path, hub_id (got {_sources or 'none'})")
    _args = []
    _inputs = []
    if "hub_id" in _m:
        _source = _m["hub_id"]
        _revision = _m.get("revision", "main")
        _args += ["--revision", _revision]
        _pinned = _revision != "main"
    else:
        if "package" in _m:
            _source = os.path.join(_package_dir(_m["package"], _where), _m.get("subdir", ""))
        else:
            _source = _m["path"]
        _source = os.path.normpath(_source)
        _inputs.append(_source)
        _revision = ""
        _pinned = True  # a local copy: the files are what they are (hashed by the score rows' provenance)
    _file = None
    if "gguf_file" in _m:
        _file = os.path.join(_source, _m["gguf_file"])
        _args += ["--gguf-file", _m["gguf_file"]]
        if "hub_id" not in _m:
            _inputs = [_file]
    if _m.get("trust_remote_code", False):
        _args.append("--trust-remote-code")
    _args += ["--name", _m.get("name", _source)]
    PRETRAINED[_key] = {
        "source": _source,
        "file": _file,
        "inputs": _inputs,
        "args": _args,
        "revision": _revision,
        "pinned": _pinned,
        "name": _m.get("name", _source),
    }


# ---------------------------------------------------------------- notebooks
with open(os.path.join(REPO, "notebooks", "catalog.yaml")) as _f:
    CATALOG = yaml.safe_load(_f)
for _nb in config["figures"]["skip"]:
    if _nb not in CATALOG:
        raise WorkflowError(f"config figures.skip: {_nb!r} is not a notebook of notebooks/catalog.yaml")
NOTEBOOKS = [nb for nb in CATALOG if nb not in config["figures"]["skip"]]

CONFIG_HASH = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _fig1_model(role):
    key = config["figures"]["fig1_models"][role]
    if key not in PRETRAINED:
        raise WorkflowError(f"config figures.fig1_models.{role}: {key!r} is not a key of config pretrained")
    return PRETRAINED[key]


def placeholders():
    """Catalog placeholder -> (path given to the notebook, file the rule depends on)."""
    em = emergence_runs()
    first_corpus = RUNS[em["encoder"][0]]["spec"]["corpus"]
    enc, dec = _fig1_model("encoder"), _fig1_model("decoder")
    return {
        "results": (RESULTS, None),
        "encoder_snapshot": (final_snapshot(em["encoder"][0]), train_done(em["encoder"][0])),
        "decoder_snapshot": (final_snapshot(em["decoder"][0]), train_done(em["decoder"][0])),
        "minilm_dir": (enc["source"], enc["inputs"][0] if enc["inputs"] else None),
        "smollm2_gguf": (dec["file"] or dec["source"], dec["inputs"][0] if dec["inputs"] else None),
        "corpus_manifest": (os.path.join(corpus_dir(first_corpus), "manifest.json"), corpus_dir(first_corpus)),
    }


def notebook_param(name, notebook):
    f = config["figures"]
    if name == "emergence_runs":
        return emergence_runs()
    if name == "ablation_runs":
        return list(GROUPS[f["ablation_group"]])
    if name == "config_hash":
        return CONFIG_HASH
    if name == "config_name":
        return ", ".join(os.path.relpath(str(p), REPO) for p in workflow.configfiles) or "config/config.yaml"
    if name in f and name not in ("skip", "fig1_models", "emergence_group", "ablation_group", "null_samples"):
        return f[name]
    raise WorkflowError(f"notebooks/catalog.yaml {notebook}: unknown param {name!r} (no config figures.{name})")


def notebook_io(notebook):
    """(papermill parameters, snakemake inputs dict, snakemake outputs dict) of one catalog entry."""
    entry = CATALOG[notebook]
    ph = placeholders()

    def fill(template):
        # the placeholder is replaced as a whole path prefix, so `{results}/tables/x.csv` works too
        for key, (value, _) in ph.items():
            template = template.replace(f"{{{key}}}", value)
        if "{" in template:
            raise WorkflowError(f"notebooks/catalog.yaml {notebook}: unknown placeholder in {template!r}")
        return template

    deps = {}
    inputs = {}
    for key, template in entry.get("inputs", {}).items():
        inputs[key] = fill(template)
        dep = inputs[key]
        for ph_key, (value, dependency) in ph.items():
            if template.strip() == f"{{{ph_key}}}" and ph_key != "results":
                dep = dependency
        if dep is not None:
            deps[key] = dep
    outputs = {key: fill(t) for key, t in entry["outputs"].items()}
    params = {name: notebook_param(name, notebook) for name in entry.get("params", [])}
    return {"inputs": inputs, "outputs": outputs, "params": params}, deps, outputs


# ---------------------------------------------------------------- small writers
# Small files (configs, captions, the model list) are rendered at parse time and written by a shell
# command: a `run:` job would start a whole Snakemake process per file (~10 s of CPU each).
WRITE_TEXT = "printf '%s' {params.text:q} > {output} 2> {log}"


def shlex_quote(text):
    return shlex.quote(str(text))


def yaml_text(data):
    return yaml.safe_dump(data, sort_keys=True)


def csv_text(rows, columns):
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row[c] for c in columns})
    return buf.getvalue()


def report_category(path):
    return "Figures" if path.endswith((".pdf", ".png")) else "Tables"


# ---------------------------------------------------------------- targets
TABLES = {
    "pretrained_scores": res("tables", "pretrained_scores.csv"),
    "training_scores": res("tables", "training_scores.csv"),
    "training_loss": res("tables", "training_loss.csv"),
    "update_scores": res("tables", "update_scores.csv"),
    "null_scores": res("tables", "null_scores.csv"),
}


def all_targets():
    targets = list(TABLES.values()) + [res("tables", "pretrained_models.csv")]
    for nb in NOTEBOOKS:
        _, _, outputs = notebook_io(nb)
        targets += list(outputs.values())
        targets += [res("notebooks", f"{nb}.ipynb"), res("report", "captions", f"{nb}.rst")]
    return targets


# trivial writers run on the submitting host, not as cluster jobs
localrules:
    all,
    write_corpus_config,
    write_run_config,
    write_caption,
    list_pretrained_models,


wildcard_constraints:
    run=_alternation(RUNS),
    corpus=_alternation(CORPORA),
    model=_alternation(PRETRAINED),
    notebook=_alternation(CATALOG),
