# Training runs: config -> RUN.yaml -> results/runs/{run}/ (attention-geometry train).
#
# Resume: the only declared output is the `train.done` marker, touched after the trainer exits 0. The
# trainer's checkpoints/, loss.csv and state/ are not outputs, so Snakemake never deletes them: a killed
# workflow started again with the same command re-runs this job, and the trainer resumes from its newest
# complete state (or does nothing when the run already finished).
#
# Requeues (training.requeues > 0, for runs longer than one job's runtime): the trainer gets `--time-limit` a
# margin below the job's `runtime` (training/launch.py: time_limit), stops there with its state saved and exits
# 75 (so does SIGTERM, SLURM's notice at a time limit or preemption); the job fails without train.done, and
# Snakemake submits it again (`retries`), which resumes from that state. Without requeues: no limit.
#
# A run's train.done whose final snapshot is gone (deleted, or never written) is removed at parse time, so that
# its job runs again and the trainer rewrites the snapshot from its final state (workflow.records).
from attention_geometry.workflow.records import drop_unfinished_markers

# A dry run (-n) changes nothing: it names them, and the plan it prints does not have their jobs yet.
if workflow.is_main_process and (_unfinished := checked(drop_unfinished_markers, PLAN, _MODE.dry_run)):
    print(
        f"{len(_unfinished)} run(s) marked trained have no complete final snapshot (e.g. {_unfinished[0]}): "
        + (
            "a run without -n removes their train.done and trains them again (this dry run changed nothing)"
            if _MODE.dry_run
            else "their train.done is removed and their training job runs again"
        ),
        file=sys.stderr,
    )


rule write_run_config:
    input:
        corpus=lambda w: run_corpus(w.run),
    output:
        res("configs", "runs", "{run}.yaml"),
    params:
        # a function of the wildcards only: Snakemake records it, so an edited run setting re-runs this rule
        # (and then training, which continues or starts afresh: docs/workflow.md); one computed from `input`
        # would not be tracked
        text=lambda w: PLAN.run_yaml(w.run),
    # every run's config is written first (a second each), so that all training jobs are ready together and
    # their own priorities (longest first) decide the order; otherwise the order in which these small jobs
    # happen to run would decide it, and a long decoder run could start last and leave a core idle at the end
    priority: 1_000_000
    log:
        res("logs", "configs", "run-{run}.log"),
    conda:
        "../envs/train.yaml"
    shell:
        WRITE_TEXT


rule train_model:
    input:
        config=res("configs", "runs", "{run}.yaml"),
        corpus=lambda w: run_corpus(w.run),
    output:
        done=touch(res("runs", "{run}", "train.done")),
    params:
        out=lambda w, output: os.path.dirname(output.done),
        final=lambda w: final_snapshot(w.run),
        device=JOBS.training.device,
        launch=TRAIN_LAUNCH.prefix,
        threads=TRAIN_LAUNCH.threads,
    threads: JOBS.training.threads
    priority: lambda w: RUNS[w.run].priority
    # training.requeues (None without: Snakemake's own --retries, e.g. a profile's, stays in force)
    retries: TRAIN_LAUNCH.retries
    resources:
        **TRAIN_LAUNCH.resources,
        # training.mem_mb where the config sets it, else from the run's model size (training/launch.py)
        mem_mb=lambda w: JOBS.training.run_mem_mb(RUNS[w.run]),
        runtime=JOBS.training.runtime,
        # the trainer's --time-limit in minutes (0: none); a resource, not a param, so that editing
        # training.runtime or requeues does not make Snakemake re-run finished runs (its params trigger)
        trainer_time_limit=TRAIN_LAUNCH.time_limit or 0,
        **TRAIN_SLURM,
    log:
        res("logs", "train", "{run}.log"),
    benchmark:
        res("benchmarks", "train", "{run}.tsv")
    # a run packed with others (training.runs_per_job) is trained by its pack's rule below
    wildcard_constraints:
        run=alternation(PLAN.unpacked_runs()),
    conda:
        "../envs/train.yaml"
    shell:
        "{params.launch} python -m attention_geometry train --no-progress --config {input.config:q} --out {params.out:q}"
        " --threads {params.threads}"
        " --device {params.device} --time-limit {resources.trainer_time_limit} >> {log:q} 2>&1"
        " || {{ code=$?; test $code -ne 75 || echo 'train_model {wildcards.run}: the trainer stopped early"
        " (time limit or SIGTERM) with its state saved (exit 75); a retry of this job resumes it' >> {log:q};"
        " exit $code; }};"
        " test -d {params.final:q} || {{ echo 'error: training of {wildcards.run} ended without its final"
        " snapshot {params.final}' >> {log:q}; exit 1; }}"


# Packs (training.runs_per_job: model size -> runs per job): the runs of a pack train at once in one job, one
# trainer process each on the job's device (`attention-geometry train-shared`, which shares --threads among them,
# passes SIGTERM on and exits 75 when a trainer stopped early with its state saved). Each run trains exactly as
# alone, into its own run dir; the job's outputs are the runs' train.done markers, so resume, requeues and a
# removed marker (drop_unfinished_markers) work as for train_model: the pack's job runs again and the trainers of
# finished runs have nothing to do. One rule per pack: a rule's outputs are fixed, and a pack's runs are listed.
for _pack, _runs in PLAN.packs.items():

    rule:
        name:
            f"train_pack_{_pack.replace('-', '_')}"
        input:
            configs=[res("configs", "runs", f"{r}.yaml") for r in _runs],
            corpora=sorted({run_corpus(r) for r in _runs}),
        output:
            [touch(train_done(r)) for r in _runs],
        params:
            outs=[PLAN.run_dir(r) for r in _runs],
            finals=[final_snapshot(r) for r in _runs],
            device=JOBS.training.device,
        threads: JOBS.training.threads
        priority: max(RUNS[r].priority for r in _runs)
        retries: TRAIN_LAUNCH.retries
        resources:
            **TRAIN_LAUNCH.resources,
            mem_mb=sum(JOBS.training.run_mem_mb(RUNS[r]) for r in _runs),
            runtime=JOBS.training.runtime,
            trainer_time_limit=TRAIN_LAUNCH.time_limit or 0,
            **TRAIN_SLURM,
        log:
            res("logs", "train", f"{_pack}.log"),
        benchmark:
            res("benchmarks", "train", f"{_pack}.tsv")
        conda:
            "../envs/train.yaml"
        shell:
            "python -m attention_geometry train-shared --no-progress --config {input.configs:q} --out {params.outs:q}"
            " --threads {threads} --device {params.device} --time-limit {resources.trainer_time_limit} >> {log:q} 2>&1"
            " || {{ code=$?; test $code -ne 75 || echo 'train_pack: a trainer stopped early (time limit or SIGTERM)"
            " with its state saved (exit 75); a retry of this job resumes it' >> {log:q}; exit $code; }};"
            " for d in {params.finals:q}; do test -d \"$d\" || {{ echo \"error: a run of this pack ended without"
            " its final snapshot $d\" >> {log:q}; exit 1; }}; done"
