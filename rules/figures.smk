# The data behind figures that needs more than reading a table (small files, committed under results/),
# then one rule per entry of notebooks/catalog.yaml (a new figure or table is one catalog entry plus its
# notebook; entries may share a notebook and differ by `constants`). Each notebook rule runs
#   attention-geometry run-notebook notebooks/NAME.ipynb {results}/notebooks/NAME.ipynb --parameters '{"inputs": ..., ...}'
# (papermill, with a readable failure: workflow/notebook.py)
# The notebook file is an input of its own rule only, so editing it re-runs just that figure. The final
# figures and tables are report() outputs with the committed caption report/captions/NAME.rst (written from
# the catalog by report/make_captions.py; `snakemake --report results/report.html`).
# A notebook rule depends only on committed files (tables, figdata, resources/, its notebook), and its
# executed copy ({results}/notebooks/NAME.ipynb) is a side file, not an output: a fresh clone (no runs, no corpora, no .snakemake/) has every
# output, so Snakemake never asks for a training or scoring job to redraw a figure.


# Figure 1: the summed W_qk of each drawn model's median-symmetry layer (a full GGUF dequantization for
# SmolLM2), one small .npz per model, so the notebook only draws.
rule extract_run_wqk:
    input:
        done=train_done("{run}"),
    output:
        res("figdata", "wqk", "runs", "{run}.npz"),
    params:
        snapshot=lambda w: final_snapshot(w.run),
    threads: JOBS.scoring.threads
    resources:
        mem_mb=JOBS.scoring.mem_mb,
        runtime=JOBS.scoring.runtime,
    log:
        res("logs", "figdata", "wqk-run-{run}.log"),
    benchmark:
        res("benchmarks", "extract_wqk", "run-{run}.tsv")
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry extract-wqk --no-progress {params.snapshot:q} --name {wildcards.run} --out {output:q} > {log:q} 2>&1"


rule extract_pretrained_wqk:
    input:
        lambda w: PRETRAINED[w.model].inputs,
    output:
        res("figdata", "wqk", "pretrained", "{model}.npz"),
    params:
        path=lambda w: PRETRAINED[w.model].path,
        name=lambda w: PRETRAINED[w.model].name,
        check=lambda w: PRETRAINED[w.model].check_command(),
        sha256=lambda w: PRETRAINED[w.model].recorded,
    threads: JOBS.scoring.threads
    resources:
        mem_mb=lambda w, input, attempt: scoring_mem_mb(PRETRAINED[w.model].hub_id and input[0], JOBS.scoring.mem_mb, attempt),
        runtime=JOBS.scoring.runtime,
    log:
        res("logs", "figdata", "wqk-pretrained-{model}.log"),
    benchmark:
        res("benchmarks", "extract_wqk", "pretrained-{model}.tsv")
    conda:
        "../envs/score.yaml"
    shell:
        "{params.check} > {log:q} 2>&1;"
        " python -m attention_geometry extract-wqk --no-progress {params.path:q} --name {params.name:q} --out {output:q} >> {log:q} 2>&1"


# The symmetry vs loss-gain/speed-up tables of the ablation runs (drawn by fig_symmetry_speedup).
rule tabulate_symmetry_speedup:
    input:
        scores=TABLES["training_scores"],
        loss=TABLES["training_loss"],
    output:
        runs=report(
            res("tables", "symmetry_speedup_runs.csv"),
            caption=caption_file("fig_symmetry_speedup"),
            category="Tables",
            subcategory="fig_symmetry_speedup",
        ),
        correlations=report(
            res("tables", "symmetry_speedup_correlations.csv"),
            caption=caption_file("fig_symmetry_speedup"),
            category="Tables",
            subcategory="fig_symmetry_speedup",
        ),
        # the sha256 of the two tables read, by content (committed; workflow.records.content_current)
        input_sums=res("config", "symmetry_speedup.inputs.sha256"),
    params:
        runs=lambda w: " ".join(PLAN.ablation_runs()),
        baseline=PLAN.baseline_init,
        level=PLAN.intervals.level,
        resamples=PLAN.intervals.resamples,
        seed=PLAN.intervals.seed,
    log:
        res("logs", "tables", "symmetry_speedup.log"),
    conda:
        "../envs/figures.yaml"
    shell:
        "python -m attention_geometry symmetry-speedup --no-progress --scores {input.scores:q} --loss {input.loss:q} --runs {params.runs}"
        " --baseline-init {params.baseline} --ci-level {params.level} --bootstrap-resamples {params.resamples}"
        " --bootstrap-seed {params.seed} --out-runs {output.runs:q} --out-correlations {output.correlations:q} > {log:q} 2>&1;"
        " python -m attention_geometry input-sums --no-progress {input.scores:q} {input.loss:q} --out {output.input_sums:q}"
        " >> {log:q} 2>&1"


# The one fact of the prepared corpus the reproduction report cites (its manifest's sha256, with its counts),
# committed with the tables: the report's provenance without the ignored corpus folder.
rule record_corpus:
    input:
        corpus_dir("{corpus}"),
    output:
        report(res("tables", "corpus_{corpus}.csv"), caption=table_caption("corpus"), category="Tables", subcategory="records"),
    log:
        res("logs", "tables", "corpus_{corpus}.log"),
    conda:
        "../envs/figures.yaml"
    shell:
        "python -m attention_geometry record-corpus --no-progress {input:q} --corpus {wildcards.corpus} --out {output:q}"
        " > {log:q} 2>&1"


# The sha256 of every tidy table, committed with them ({results}/config/tables.sha256; workflow.records): a clone has
# no run folders to remake its tables from, so a table that no longer has its recorded sha256 stops the parse
# (records.table_sums_error) instead of being drawn into the claims. Remade whenever a table is; current by content
# in a fresh clone (records.content_current). A record like record_corpus, whose output it reads, so it runs in the
# figures env: a rule of an earlier family reading a later family's output runs outside its stage (tests/test_envs.py).
rule record_table_sums:
    input:
        list(TABLES.values()),
    output:
        table_sums_path(PLAN),
    log:
        res("logs", "tables", "tables_sha256.log"),
    conda:
        "../envs/figures.yaml"
    shell:
        "python -m attention_geometry input-sums --no-progress --tables {input:q} --out {output:q} > {log:q} 2>&1"


# The config that made each committed result (attention_geometry.workflow.records), written from the config
# alone (no inputs: where results exist they were checked against it at parse time, and missing results
# are made from the current config).
rule record_config:
    output:
        res("config", "{key}.yaml"),
    params:
        text=lambda w: record_text(RECORDS[w.key][1]),
    log:
        res("logs", "config", "{key}.log"),
    conda:
        "../envs/figures.yaml"
    shell:
        WRITE_TEXT


for _nb in NOTEBOOKS:
    _parameters, _deps, _outputs = checked(PLAN.notebook_io, _nb)
    _caption = caption_file(_nb)

    rule:
        name:
            f"make_{_nb}"
        input:
            notebook=notebook_file(CATALOG, _nb),
            **_deps,
        output:
            **{
                key: report(path, caption=_caption, category=report_category(path), subcategory=_nb)
                for key, path in _outputs.items()
            },
            # the sha256 of the notebook and its inputs, by content (committed; workflow.records.content_current)
            input_sums=input_sums_path(PLAN, _nb),
        params:
            parameters=json.dumps(_parameters, sort_keys=True),
            # the executed copy (every cell's output; kept when a cell fails) is not declared as a log: a
            # failed job prints its logs, and this one is a page of notebook JSON. The log holds one error line
            # and the failing cell's traceback (workflow/notebook.py).
            executed=res("notebooks", f"{_nb}.ipynb"),
            # the committed tables' record: the job checks the tables it draws from against it, whatever the
            # command line (a rule filter can keep --forceall from remaking them; workflow/notebook.py)
            tables_record=table_sums_path(PLAN),
        log:
            res("logs", "notebooks", f"{_nb}.log"),
        conda:
            "../envs/figures.yaml"
        shell:
            "python -m attention_geometry run-notebook --no-progress {input.notebook:q} {params.executed:q}"
            " --parameters {params.parameters:q} --input-sums {output.input_sums:q}"
            " --tables-record {params.tables_record:q} > {log:q} 2>&1"


# A failed job never deletes a committed result: Snakemake removes a job's outputs before it runs and those of a
# job that fails, so the existing outputs of the rules that draw from committed files (every notebook rule and
# tabulate_symmetry_speedup) are kept aside now, under .snakemake/committed-outputs/, and `onerror` puts back each
# one that is missing (attention_geometry.workflow.keep), older than any input so that the next run retries it.
# A job killed outright runs no `onerror`: the next parse (any command, --unlock too) puts back the kept set of each
# job whose input-sums record is missing, before keeping again (keep.keep_committed).
from attention_geometry.workflow.keep import KEEP_DIR, keep_committed, restore_missing
from attention_geometry.workflow.records import drawn_entries

KEPT_OUTPUTS, _unfinished = (
    keep_committed(outputs for outputs, _inputs in drawn_entries(PLAN)) if workflow.is_main_process else ([], [])
)
if _unfinished:
    print(
        f"restored {len(_unfinished)} committed result(s) that a job which did not finish (killed) had removed, from "
        f"{KEEP_DIR}, marked out of date so that the next run remakes them: {', '.join(_unfinished)}",
        file=sys.stderr,
    )


onerror:
    _restored = restore_missing(KEPT_OUTPUTS)
    if _restored:
        print(
            f"restored {len(_restored)} committed result(s) that failed job(s) had removed, as they were before this "
            f"run and marked out of date, so the next run retries them: {', '.join(_restored)}",
            file=sys.stderr,
        )
