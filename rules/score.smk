# Scores: pretrained models, every snapshot of every run, the W_qk updates of the update group's runs;
# then the tidy tables of the data contracts (attention-geometry concat-tables).


# A hub model's q/k tensors and config (only their bytes are read, by HTTP range requests), fetched on the
# submitting host (a local rule: compute nodes may have no internet); score_pretrained reads them offline.
rule prefetch_qk:
    output:
        directory(res("hub-qk", "{model}")),
    params:
        hub_id=lambda w: PRETRAINED[w.model].hub_id,
        args=lambda w: " ".join(shlex_quote(a) for a in PRETRAINED[w.model].fetch_args),
        online=ONLINE_ENV,  # the one kind of job that reads the hub
    log:
        res("logs", "prefetch_qk", "{model}.log"),
    wildcard_constraints:
        model=alternation([m for m in PLAN.prefetched if m not in PLAN.prefetched_on_cluster] or ["-"]),
    conda:
        "../envs/score.yaml"
    shell:
        "{params.online} python -m attention_geometry prefetch-qk --no-progress {params.hub_id:q} --out {output:q} {params.args} > {log:q} 2>&1"


# The same for q/k subsets above config scoring.prefetch_local_max_gb (pretrained `qk_gb`: Llama-3.1-405B's
# is 72 GB), as a cluster job: a login node is no place for it. Its partition must reach the hub (set
# scoring.prefetch_slurm_partition where only some nodes have the network).
use rule prefetch_qk as prefetch_qk_on_cluster with:
    wildcard_constraints:
        model=alternation(PLAN.prefetched_on_cluster or ["-"]),
    resources:
        mem_mb=JOBS.scoring.mem_mb,
        runtime=JOBS.scoring.runtime,
        **PREFETCH_SLURM,


rule score_pretrained:
    input:
        lambda w: PRETRAINED[w.model].inputs,
    output:
        res("pretrained", "{model}.csv"),
    params:
        source=lambda w: PRETRAINED[w.model].source,
        args=lambda w: " ".join(shlex_quote(a) for a in PRETRAINED[w.model].args),
        env=lambda w: PRETRAINED[w.model].offline_env,
        # a packaged model: its recorded sha256, checked in the job (a re-run follows a changed hash, not the
        # installed files' mtimes)
        check=lambda w: PRETRAINED[w.model].check_command(),
        sha256=lambda w: PRETRAINED[w.model].recorded,
    threads: JOBS.scoring.threads
    resources:
        mem_mb=lambda w, input, attempt: scoring_mem_mb(PRETRAINED[w.model].hub_id and input[0], JOBS.scoring.mem_mb, attempt),
        runtime=JOBS.scoring.runtime,
    log:
        res("logs", "score_pretrained", "{model}.log"),
    benchmark:
        res("benchmarks", "score_pretrained", "{model}.tsv")
    conda:
        "../envs/score.yaml"
    shell:
        "{params.check} > {log:q} 2>&1;"
        " {params.env} python -m attention_geometry score --no-progress {params.source:q} --out {output:q} {params.args} >> {log:q} 2>&1"


# Grouped-query models scored by the paper's expansion beside the attention's matrix (a known error of the
# paper's code, reproduced: scoring/paper_gqa.py), from the same files as score_pretrained.
rule compare_gqa:
    input:
        lambda w: PRETRAINED[w.model].inputs,
    output:
        res("gqa", "{model}.csv"),
    params:
        source=lambda w: PRETRAINED[w.model].source,
        args=lambda w: " ".join(shlex_quote(a) for a in PRETRAINED[w.model].args),
        env=lambda w: PRETRAINED[w.model].offline_env,
        # a packaged model: its recorded sha256, checked in the job (a re-run follows a changed hash, not the
        # installed files' mtimes)
        check=lambda w: PRETRAINED[w.model].check_command(),
        sha256=lambda w: PRETRAINED[w.model].recorded,
    wildcard_constraints:
        model=alternation(PLAN.gqa_models() or ["-"]),
    threads: JOBS.scoring.threads
    resources:
        mem_mb=lambda w, input, attempt: scoring_mem_mb(PRETRAINED[w.model].hub_id and input[0], JOBS.scoring.mem_mb, attempt),
        runtime=JOBS.scoring.runtime,
    log:
        res("logs", "compare_gqa", "{model}.log"),
    conda:
        "../envs/score.yaml"
    shell:
        "{params.check} > {log:q} 2>&1;"
        " {params.env} python -m attention_geometry compare-gqa --no-progress {params.source:q} --out {output:q} {params.args} >> {log:q} 2>&1"


rule concat_gqa:
    input:
        expand(res("gqa", "{model}.csv"), model=PLAN.gqa_models()),
    output:
        report(PLAN.gqa_table(), caption=table_caption("gqa_paper_method"), category="Tables", subcategory="tidy data"),
    log:
        res("logs", "tables", "gqa_paper_method.log"),
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry concat-tables --no-progress {input:q} --out {output:q} > {log:q} 2>&1"


rule join_pretrained_parts:
    # a GGUF file shipped split over packages (config gguf_parts), joined once and its sha256 checked; the parts
    # are pkg: specs, resolved in the job (the joined file's recorded sha256 is what a re-run follows)
    output:
        res("pretrained", "files", "{model}", "{gguf}"),
    wildcard_constraints:
        gguf=r"[^/]+\.gguf",
    params:
        parts=lambda w: " ".join(shlex_quote(p) for p in PRETRAINED[w.model].parts),
        sha256=lambda w: PRETRAINED[w.model].sha256,
    log:
        res("logs", "join_pretrained_parts", "{model}-{gguf}.log"),
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry join-parts --no-progress {params.parts} --sha256 {params.sha256} --out {output:q} > {log:q} 2>&1"


rule list_pretrained_models:
    output:
        report(res("tables", "pretrained_models.csv"), caption=table_caption("pretrained_models"), category="Tables", subcategory="records"),
    params:
        text=PLAN.pretrained_models_csv(),
    log:
        res("logs", "list_pretrained_models.log"),
    conda:
        "../envs/score.yaml"
    shell:
        WRITE_TEXT


rule score_checkpoints:
    input:
        done=train_done("{run}"),
    output:
        res("runs", "{run}", "scores.csv"),
    params:
        run_dir=lambda w, input: os.path.dirname(input.done),
    threads: JOBS.scoring.threads
    resources:
        mem_mb=JOBS.scoring.mem_mb,
        runtime=JOBS.scoring.runtime,
    log:
        res("logs", "score_checkpoints", "{run}.log"),
    benchmark:
        res("benchmarks", "score_checkpoints", "{run}.tsv")
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry score-checkpoints --no-progress {params.run_dir:q} --out {output:q} > {log:q} 2>&1"


rule score_updates:
    input:
        done=train_done("{run}"),
        corpus=lambda w: run_corpus(w.run),
    output:
        res("runs", "{run}", "update_scores.csv"),
    params:
        run_dir=lambda w, input: os.path.dirname(input.done),
        steps=" ".join(str(s) for s in PLAN.updates.steps),
        batches=PLAN.updates.batches,
    threads: JOBS.scoring.threads
    resources:
        mem_mb=JOBS.scoring.mem_mb,
        runtime=JOBS.scoring.runtime,
    log:
        res("logs", "score_updates", "{run}.log"),
    benchmark:
        res("benchmarks", "score_updates", "{run}.tsv")
    conda:
        "../envs/train.yaml"
    shell:
        "python -m attention_geometry score-updates --no-progress {params.run_dir:q} --corpus {input.corpus:q} --out {output:q}"
        " --steps {params.steps} --batches {params.batches} > {log:q} 2>&1"


# The random-init null (docs/contracts.md): untrained models of the emergence group's shape under each init,
# seeds 100000 + i; seconds of compute, one job.
rule score_null_inits:
    input:
        config=lambda w: res("configs", "runs", f"{null_source_run()}.yaml"),
        corpus=lambda w: run_corpus(null_source_run()),
    output:
        report(TABLES["null_scores"], caption=table_caption("null_scores"), category="Tables", subcategory="tidy data"),
    params:
        inits=" ".join(PLAN.null_inits()),
        samples=PLAN.null_samples(),
    threads: JOBS.scoring.threads
    resources:
        mem_mb=JOBS.scoring.mem_mb,
        runtime=JOBS.scoring.runtime,
    log:
        res("logs", "tables", "null_scores.log"),
    benchmark:
        res("benchmarks", "score_null_inits.tsv")
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry score-null --no-progress --run-config {input.config:q} --inits {params.inits}"
        " --samples {params.samples} --threads {threads} --out {output:q} > {log:q} 2>&1"


rule concat_pretrained_scores:
    input:
        expand(res("pretrained", "{model}.csv"), model=list(PRETRAINED)),
    output:
        report(TABLES["pretrained_scores"], caption=table_caption("pretrained_scores"), category="Tables", subcategory="tidy data"),
    log:
        res("logs", "tables", "pretrained_scores.log"),
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry concat-tables --no-progress {input:q} --kind pretrained_scores --out {output:q} > {log:q} 2>&1"


rule concat_training_scores:
    input:
        expand(res("runs", "{run}", "scores.csv"), run=list(RUNS)),
    output:
        report(TABLES["training_scores"], caption=table_caption("training_scores"), category="Tables", subcategory="tidy data"),
    log:
        res("logs", "tables", "training_scores.log"),
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry concat-tables --no-progress {input:q} --kind training_scores --out {output:q} > {log:q} 2>&1"


# loss.csv grows while a run trains (and must survive a kill for resume), so it is not a declared output;
# the train.done markers are the inputs and the finished logs are read next to them.
rule concat_training_loss:
    input:
        [train_done(run) for run in RUNS],
    output:
        report(TABLES["training_loss"], caption=table_caption("training_loss"), category="Tables", subcategory="tidy data"),
    params:
        files=lambda w, input: [os.path.join(os.path.dirname(d), "loss.csv") for d in input],
    log:
        res("logs", "tables", "training_loss.log"),
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry concat-tables --no-progress {params.files:q} --kind training_loss --out {output:q} > {log:q} 2>&1"


# per run, each start or resume of its trainer: the git commit and CPU each run's steps were trained at
# (training.provenance_table; formats.columns.PROVENANCE_COLUMNS)
rule tabulate_run_provenance:
    input:
        [train_done(run) for run in RUNS],
    output:
        report(res("tables", "run_provenance.csv"), caption=table_caption("run_provenance"), category="Tables", subcategory="records"),
    params:
        files=lambda w, input: [os.path.join(os.path.dirname(d), "provenance.csv") for d in input],
    log:
        res("logs", "tables", "run_provenance.log"),
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry concat-tables --no-progress {params.files:q} --kind run_provenance --out {output:q} > {log:q} 2>&1"


rule concat_update_scores:
    input:
        expand(res("runs", "{run}", "update_scores.csv"), run=UPDATE_RUNS),
    output:
        report(TABLES["update_scores"], caption=table_caption("update_scores"), category="Tables", subcategory="tidy data"),
    log:
        res("logs", "tables", "update_scores.log"),
    conda:
        "../envs/score.yaml"
    shell:
        "python -m attention_geometry concat-tables --no-progress {input:q} --kind update_scores --out {output:q} > {log:q} 2>&1"
