"""The report and the committed results: the report captions are committed and
match notebooks/catalog.yaml; the notebook rules depend on committed files only; and, in a copy of the
repository as a fresh clone has it (the tracked files written in checkout order, no results/runs, no
results/corpora, no .snakemake/), `snakemake -n` schedules no training or scoring job, editing one notebook
schedules only its own job(s), and `snakemake --report` lists every figure and table with its caption.

The clone tests run Snakemake in a copy under tmp_path (never in the repository's results/ or .snakemake/)."""

from __future__ import annotations

import hashlib
import html
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import config_plan, job_counts, snakemake, validated_config

from attention_geometry.formats.corpus import write_corpus_record
from attention_geometry.workflow.plan import caption_rst, load_catalog, notebook_file

REPO = Path(__file__).resolve().parents[1]

CATALOG = load_catalog(str(REPO / "notebooks" / "catalog.yaml"))
# what a notebook edit or a fresh clone may schedule: drawing from committed tables, nothing heavier
DRAWING = {f"make_{nb}" for nb in CATALOG} | {"tabulate_symmetry_speedup", "all"}
# the default config's results folder: where a fresh clone's committed results are
RESULTS = validated_config("config.yaml")["results"]


def _git_files(*args: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", *args], cwd=REPO, capture_output=True, text=True, check=True)
    return sorted(p for p in out.stdout.split("\0") if p)


def _words(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------------------------------------ captions


def test_every_tidy_table_in_the_report_has_its_committed_caption():
    rules = "".join(p.read_text() for p in (REPO / "rules").glob("*.smk"))
    named = re.findall(r'table_caption\("([a-z_]+)"\)', rules)
    assert {"pretrained_scores", "training_scores", "training_loss", "update_scores", "null_scores"} <= set(named)
    records = {"corpus", "gqa_paper_method", "pretrained_models", "run_provenance"}  # records beside the tidy tables
    for name in named:
        text = (REPO / "report" / "tables" / f"{name}.rst").read_text()
        if name in records:
            assert "Made by rule" in text, name
        else:
            assert "Tidy table" in text and "docs/contracts.md" in text, name


def test_committed_captions_match_the_catalog():
    """report/captions/ holds exactly one caption per catalog entry, as report/make_captions.py writes it
    (after editing a caption in the catalog: python report/make_captions.py)."""
    folder = REPO / "report" / "captions"
    assert sorted(p.stem for p in folder.glob("*.rst")) == sorted(CATALOG), "run python report/make_captions.py"
    for name, entry in CATALOG.items():
        text = (folder / f"{name}.rst").read_text(encoding="utf-8")
        assert text == caption_rst(CATALOG, name), f"{name}: run python report/make_captions.py"
        assert _words(entry["caption"]) in _words(text) and notebook_file(CATALOG, name) in text
    proc = subprocess.run(
        [sys.executable, str(REPO / "report" / "make_captions.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_caption_check_reports_a_drifted_caption(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("make_captions", REPO / "report" / "make_captions.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    folder = tmp_path / "captions"
    shutil.copytree(REPO / "report" / "captions", folder)
    monkeypatch.setattr(mod, "FOLDER", folder)
    monkeypatch.setattr(sys, "argv", ["make_captions.py", "--check"])
    assert mod.main() == 0
    (folder / "fig3_emergence.rst").write_text("an old caption\n")
    (folder / "gone.rst").write_text("a removed entry\n")
    assert mod.main() == 1
    assert capsys.readouterr().out.splitlines() == [
        "report/captions/fig3_emergence.rst: differs from notebooks/catalog.yaml",
        "report/captions/gone.rst: left over",
    ]
    monkeypatch.setattr(sys, "argv", ["make_captions.py"])
    assert mod.main() == 0
    assert (folder / "fig3_emergence.rst").read_text() == caption_rst(CATALOG, "fig3_emergence")
    assert not (folder / "gone.rst").exists()


# ------------------------------------------------------------------------------------------ dependencies


def test_notebook_rules_read_only_committed_files():
    """Every input of every notebook rule of the default config is a file under version control, so no
    notebook needs a run folder, a corpus or a scoring output that a clone does not have."""
    tracked = set(_git_files()) | set(_git_files("--others", "--exclude-standard"))
    p = config_plan(validated_config("config.yaml"))
    for nb in p.notebooks:
        _, deps, _ = p.notebook_io(nb)
        for key, path in deps.items():
            assert path in tracked, (nb, key, path)


@pytest.mark.parametrize("config", ["config.yaml", "study2.yaml", "study1.yaml"])
def test_committed_input_sums_are_those_of_the_committed_notebooks_and_tables(config):
    """Every committed figure's input-sums record ({results}/config/make_*.inputs.sha256) names exactly the
    sha256 of its notebook and inputs as committed now (hashed here with hashlib), so a fresh clone's `make run`
    (or the workflow with an earlier study's config) redraws nothing. An edited notebook committed without
    redrawing its figure for every study fails here, in the fast tier, instead of in the clone test of test-all."""
    p = config_plan(validated_config(config))
    stale = []
    for nb in p.notebooks:
        parameters, _, outputs = p.notebook_io(nb)
        record = REPO / p.res("config", f"make_{nb}.inputs.sha256")
        if not record.is_file():
            stale.append(f"{nb}: no record {record.relative_to(REPO)}")
            continue
        files = [notebook_file(p.catalog, nb), *parameters["inputs"].values()]
        want = {str(Path(f)): hashlib.sha256((REPO / f).read_bytes()).hexdigest() for f in files}
        got = {}
        for line in record.read_text().splitlines():
            digest, _, name = line.partition("  ")
            got[str(Path(name))] = digest
        if got != want:
            stale.append(f"{nb}: {sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))}")
    assert not stale, "redraw these figures (snakemake --cores all) and commit their records: " + "; ".join(stale)


def test_corpus_record(tmp_path):
    corpus = tmp_path / "wiki_offline"
    corpus.mkdir()
    manifest = {
        "n_documents": 3,
        "n_tokens": 40,
        "block_len": 8,
        "vocab_size": 64,
        "documents_sha256": "ab",
        "n_train_blocks": 4,
        "n_heldout_blocks": 1,
        "sources": [{"path": "/a/machine/path"}],
    }
    (corpus / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "t" / "corpus_wiki_offline.csv"
    write_corpus_record(str(corpus), "wiki_offline", str(out))
    sha = hashlib.sha256((corpus / "manifest.json").read_bytes()).hexdigest()
    assert out.read_text() == (
        "corpus,manifest_sha256,documents_sha256,n_documents,n_tokens,n_train_blocks,"
        f"n_heldout_blocks,block_len,vocab_size\nwiki_offline,{sha},ab,3,40,4,1,8,64\n"
    )


# ------------------------------------------------------------------------------------------ a fresh clone


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return _clone_into(tmp_path_factory.mktemp("clone"))


def _clone_into(dest: Path) -> Path:
    """The files a clone of this working tree has (tracked, plus new files not ignored), written one after
    the other in path order as `git clone` does, so their modification times increase in that order."""
    for rel in _git_files() + _git_files("--others", "--exclude-standard"):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / rel)
    for ignored in (*(f"{RESULTS}/{d}" for d in ("runs", "corpora", "notebooks", "report")), ".snakemake"):
        assert not (dest / ignored).exists(), ignored
    return dest


@pytest.mark.workflow
def test_a_clone_with_an_edited_config_stops_instead_of_drawing_old_tables(tmp_path):
    """Committed tables made with another config than the clone's (config/config.yaml edited after cloning):
    the workflow stops with one short line naming the results folder and a list file of exactly the results that
    config feeds (and their records), whose removal remakes them; after that `rm`, a dry run schedules their
    training and scoring (no drawing from old data). A
    notebook constant edited names only drawn results, never a training table."""
    wf = _clone_into(tmp_path / "clone")
    path = wf / "config" / "config.yaml"
    original = path.read_text()
    cfg = yaml.safe_load(original)
    cfg["training"]["groups"]["main"]["settings"]["max_steps"] *= 2  # valid for any design: every step still planned
    path.write_text(yaml.safe_dump(cfg))
    # a dry run says what is stale and how to remake it, and goes on (the user can look at the plan) ...
    proc = snakemake("-n", cwd=wf, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("config: ")]
    assert len(lines) == 1 and f"in {RESULTS} were made with another config" in lines[0], proc.stderr[-3000:]
    assert "a dry run goes on" in lines[0]
    listing = wf / RESULTS / "logs" / "stale-results.txt"
    assert f"xargs rm -f -- < {RESULTS}/logs/stale-results.txt" in lines[0]
    rm = listing.read_text().split()
    assert f"{RESULTS}/tables/training_scores.csv" in rm
    # ... while the workflow itself stops with the same line before any job
    real = snakemake("--cores", "1", cwd=wf, check=False)
    assert real.returncode != 0
    stops = [ln for ln in (real.stdout + real.stderr).splitlines() if ln.startswith("config: ")]
    assert len(stops) == 1 and stops[0] in lines[0]
    assert f"{RESULTS}/tables/pretrained_scores.csv" not in rm
    # a dry run with --forceall lists everything remade from the edited config (the real run stops as without it:
    # test_another_studys_committed_record_is_refused_even_under_forceall)
    forced = job_counts(snakemake("-n", "--forceall", cwd=wf).stdout)
    assert forced["train_model"] == len(config_plan(validated_config("config.yaml")).runs)
    subprocess.run(["rm", *rm], cwd=wf, check=True)
    counts = job_counts(snakemake("-n", cwd=wf).stdout)
    n_runs = len(config_plan(validated_config("config.yaml")).runs)
    assert counts["train_model"] == counts["score_checkpoints"] == n_runs
    assert counts["concat_training_scores"] == counts["concat_training_loss"] == 1
    assert counts["record_config"] == sum(1 for p in rm if p.startswith(f"{RESULTS}/config/"))
    assert "score_pretrained" not in counts and "concat_pretrained_scores" not in counts

    cfg = yaml.safe_load(original)
    cfg["figures"]["ci_level"] = 0.9
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", cwd=wf, check=False)
    line = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("config: ")]
    listed = listing.read_text()
    assert len(line) == 1 and f"{RESULTS}/figures/fig3_emergence.pdf" in listed
    assert "training_scores.csv" not in listed and "null_scores.csv" not in listed


@pytest.mark.workflow
def test_another_studys_committed_record_is_refused_even_under_forceall(tmp_path):
    """A results folder that holds another config's committed record (a mistyped `--config results=...`) stops the
    parse with one line under --forceall / -F as well (issue 41.4): --forceall would rewrite that study's whole
    record. The line says how to go on deliberately. --list-target-rules parses the workflow and stops there, so no
    job runs here even where the guard is missing; a dry run prints the line and goes on, as for any stale result."""
    from helpers import copy_workflow

    wf = copy_workflow(tmp_path / "wf")
    for rel in _git_files("results/study1") + _git_files("--others", "--exclude-standard", "results/study1"):
        (wf / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, wf / rel)
    study1 = ("--config", "results=results/study1")  # config/config.yaml's runs, study 1's folder
    for force in ("--forceall", "-F"):
        proc = snakemake(force, "--cores", "1", *study1, "--list-target-rules", cwd=wf, check=False)
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("config: ")]
        assert proc.returncode != 0 and len(lines) == 1, (force, proc.stdout[-2000:], proc.stderr[-3000:])
        assert "in results/study1 were made with another config" in lines[0], lines[0]
        assert "--forceall" in lines[0] and "results=" in lines[0], lines[0]  # why, and a fresh folder instead
    dry = snakemake("-n", "--forceall", "--cores", "1", *study1, cwd=wf, check=False)
    assert dry.returncode == 0 and "a dry run goes on" in dry.stderr, dry.stderr[-3000:]


@pytest.mark.workflow
def test_a_hand_edited_committed_table_stops_the_parse_instead_of_redrawing_the_claims(tmp_path):
    """A study's run folders are not committed, so its tidy tables cannot be remade; a hand edit of one (five seeds'
    symmetry scaled by 0.15, every value still a valid score) redrew claims.csv with no message (issue 41.5). Now the
    parse stops with one line naming the table and how to accept the change; a dry run prints it and goes on; claims.csv
    stays as committed. In a copy of the workflow with the default's committed record (study 3)."""
    import csv
    import io

    from helpers import copy_workflow

    wf = copy_workflow(tmp_path / "wf")
    for rel in _git_files(RESULTS) + _git_files("--others", "--exclude-standard", RESULTS):  # as a clone has it
        (wf / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, wf / rel)
    table = wf / RESULTS / "tables" / "training_scores.csv"
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    seeds = sorted({r["seed"] for r in rows if r["objective"] == "encoder"})[:5]
    assert len(seeds) == 5
    for r in rows:
        if r["seed"] in seeds and r["objective"] == "encoder":
            r["symmetry"] = repr(0.15 * float(r["symmetry"]))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    table.write_text(out.getvalue())
    claims = (wf / RESULTS / "tables" / "claims.csv").read_bytes()

    dry = snakemake("-n", "--cores", "1", cwd=wf, check=False)
    lines = [ln for ln in dry.stderr.splitlines() if ln.startswith(f"{RESULTS}/tables/training_scores.csv: ")]
    assert dry.returncode == 0 and len(lines) == 1 and "a dry run goes on" in lines[0], dry.stderr[-3000:]
    real = snakemake("--cores", "1", cwd=wf, check=False)
    stops = [ln for ln in (real.stdout + real.stderr).splitlines() if f"{RESULTS}/config/tables.sha256" in ln]
    assert real.returncode != 0 and len(stops) == 1, real.stderr[-3000:]
    assert f"rm {RESULTS}/config/tables.sha256" in stops[0] and "git checkout" in stops[0], stops[0]
    assert (wf / RESULTS / "tables" / "claims.csv").read_bytes() == claims


def _edit(path: Path):
    """A real edit of a notebook (its metadata), not just a newer mtime."""
    nb = json.loads(path.read_text())
    nb["metadata"]["edited_by_test"] = nb["metadata"].get("edited_by_test", 0) + 1
    path.write_text(json.dumps(nb, indent=1))


@pytest.mark.workflow
def test_fresh_clone_redraws_without_training_and_a_notebook_edit_reruns_only_its_jobs(clone):
    # a fresh clone: whatever is out of date by the checkout's modification times is drawn again from the
    # committed tables; no corpus, training, scoring or W_qk extraction is scheduled
    counts = job_counts(snakemake("-n", cwd=clone).stdout)
    assert set(counts) <= DRAWING, counts
    # `snakemake --touch` marks the committed results current; then nothing is to be done
    snakemake("--touch", "--cores", "1", cwd=clone)
    proc = snakemake("-n", cwd=clone)
    assert "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-2000:]
    # editing one notebook schedules its own job only
    _edit(clone / "notebooks" / "fig3_emergence.ipynb")
    assert job_counts(snakemake("-n", cwd=clone).stdout) == {"make_fig3_emergence": 1, "all": 1}
    _edit(clone / "notebooks" / "reproduction_report.ipynb")
    assert job_counts(snakemake("-n", cwd=clone).stdout) == {
        "make_fig3_emergence": 1,
        "make_reproduction_report": 1,
        "all": 1,
    }
    # a notebook shared by three entries (Figures 2, S1, S2) schedules those three
    snakemake("--touch", "--cores", "1", cwd=clone)
    _edit(clone / "notebooks" / "pretrained_scores_vs_params.ipynb")
    counts = job_counts(snakemake("-n", cwd=clone).stdout)
    shared = {nb for nb in CATALOG if notebook_file(CATALOG, nb) == "notebooks/pretrained_scores_vs_params.ipynb"}
    assert counts == {**{f"make_{nb}": 1 for nb in shared}, "all": 1} and len(shared) == 3


def _script_json(page: str, name: str):
    """The JSON the report's template assigns to `var NAME = ...;` (an object or a string, on one line)."""
    found = re.findall(rf"^\s*var {name} = ([{{\"].*);\s*$", page, re.M)
    assert len(found) == 1, (name, len(found))
    return json.loads(found[0])


def _text(fragment: str) -> str:
    return _words(html.unescape(re.sub(r"<[^>]+>", " ", fragment)))


@pytest.mark.workflow
def test_report_from_a_fresh_clone_lists_every_figure_and_table_with_its_caption(clone):
    out = clone / "results" / "report.html"
    proc = snakemake("--report", "results/report.html", cwd=clone)
    # a clone has no Snakemake records of the committed results' jobs: one line says so, not one per file
    said = proc.stdout + proc.stderr
    assert "Missing metadata" not in said
    assert len([ln for ln in said.splitlines() if "have no Snakemake metadata here" in ln]) == 1
    page = out.read_text(encoding="utf-8")
    results = _script_json(page, "results")
    assert "Reproduction of Saponati et al." in _text(_script_json(page, "workflow_desc"))
    expected = {}
    made = config_plan(validated_config("config.yaml")).notebooks  # the catalog but the entries the config skips
    for nb, entry in CATALOG.items():
        for template in entry["outputs"].values() if nb in made else ():
            expected[template.replace("{results}", RESULTS)] = (f"make_{nb}", entry["caption"])
    speedup = CATALOG["fig_symmetry_speedup"]["caption"]
    for name in (
        ("symmetry_speedup_runs.csv", "symmetry_speedup_correlations.csv") if "fig_symmetry_speedup" in made else ()
    ):
        expected[f"{RESULTS}/tables/{name}"] = ("tabulate_symmetry_speedup", speedup)
    tidy = {"pretrained_scores": "concat_pretrained_scores", "training_scores": "concat_training_scores"}
    tidy |= {"training_loss": "concat_training_loss", "update_scores": "concat_update_scores"}
    tidy |= {"null_scores": "score_null_inits"}
    tidy |= {"gqa_paper_method": "concat_gqa", "pretrained_models": "list_pretrained_models"}
    if validated_config("config.yaml")["training"].get("provenance_table"):  # the runs' commit and CPU record
        tidy |= {"run_provenance": "tabulate_run_provenance"}
    for name, rule in tidy.items():  # the tidy tables and records, captioned from report/tables/
        expected[f"{RESULTS}/tables/{name}.csv"] = (rule, (REPO / "report" / "tables" / f"{name}.rst").read_text())
    corpus_caption = (REPO / "report" / "tables" / "corpus.rst").read_text()  # one record per corpus, one caption
    expected[f"{RESULTS}/tables/corpus_wiki_offline.csv"] = ("record_corpus", corpus_caption)
    assert set(results) == set(expected)
    for path, (rule, caption) in expected.items():
        record = results[path]
        assert record["job_properties"]["rule"] == rule, path
        assert _words(caption) in _text(record["caption"]), path
        assert record["data_uri"].startswith("data:"), path  # the file itself is embedded
