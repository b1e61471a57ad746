# Corpora: config -> CORPUS.yaml -> tokenized blocks (attention-geometry prepare-corpus).
# What a corpus or image set reads from the Hugging Face hub (dataset files at a pinned revision, a pretrained
# tokenizer) is fetched first by a local rule on the submitting host (attention-geometry fetch-hub-data), so the
# compute jobs read only that folder, with the hub offline (docs/data.md, "Hub data"). The parse-time choice of
# which corpora and image sets have hub inputs: data.corpus_config.fetch_config / data.image_config.fetch_config
# (torch-free; None for the offline ones, which get no fetch job).
from attention_geometry.data import corpus_config as _corpus_config
from attention_geometry.data import image_config as _image_config

CORPUS_FETCH = {k: f for k, c in CORPORA.items() if (f := _corpus_config.fetch_config(c)) is not None}
IMAGE_FETCH = {k: f for k, c in IMAGES.items() if (f := _image_config.fetch_config(c)) is not None}


# Downloads run on the submitting host (compute nodes need no internet); every other job runs with the hub
# offline, so the fetch commands switch it back on for themselves (env ... =0). A prepare rule takes the fetched
# folder as input, and its command `--hub-data DIR`, only for a key with hub inputs (the flag is a parameter
# derived from that input, so the offline corpora's jobs are not re-run for its sake).
localrules:
    write_corpus_fetch_config,
    fetch_corpus_data,
    write_image_fetch_config,
    fetch_image_data,


rule write_corpus_config:
    output:
        res("configs", "corpora", "{corpus}.yaml"),
    params:
        text=lambda w: yaml_text(CORPORA[w.corpus]),
    log:
        res("logs", "configs", "corpus-{corpus}.log"),
    conda:
        "../envs/data.yaml"
    shell:
        WRITE_TEXT


# The part of a corpus config that decides its hub inputs, alone: a change elsewhere (block_len, the vocabulary)
# leaves the fetched folder as it is.
rule write_corpus_fetch_config:
    output:
        res("configs", "fetch", "corpora", "{corpus}.yaml"),
    params:
        text=lambda w: yaml_text(CORPUS_FETCH[w.corpus]),
    log:
        res("logs", "configs", "fetch-corpus-{corpus}.log"),
    wildcard_constraints:
        corpus=alternation(CORPUS_FETCH),
    conda:
        "../envs/data.yaml"
    shell:
        WRITE_TEXT


rule fetch_corpus_data:
    input:
        config=res("configs", "fetch", "corpora", "{corpus}.yaml"),
    output:
        directory(res("hub-data", "corpora", "{corpus}")),
    log:
        res("logs", "fetch_corpus_data", "{corpus}.log"),
    wildcard_constraints:
        corpus=alternation(CORPUS_FETCH),
    conda:
        "../envs/data.yaml"
    params:
        online=ONLINE_ENV,  # the hub on again, for this command only
    shell:
        "{params.online} python -m attention_geometry fetch-hub-data --no-progress --config {input.config:q} "
        "--out {output:q} > {log:q} 2>&1"


# Paths outside the workflow (a Jigsaw CSV, text files) are not rule inputs, so a dry run of the paper
# config passes anywhere; prepare-corpus checks them when this rule runs and stops with one clear line.
# Their content is a parameter (`path sha256` per file, workflow.Plan.corpus_inputs): input text that
# changed re-runs this rule (and what depends on the corpus) instead of "nothing to do". Hub inputs come
# from the fetched folder only (--hub-data), read offline.
rule prepare_corpus:
    input:
        config=res("configs", "corpora", "{corpus}.yaml"),
        hub_data=lambda w: res("hub-data", "corpora", w.corpus) if w.corpus in CORPUS_FETCH else [],
    params:
        inputs=lambda w: PLAN.corpus_inputs(w.corpus),
        hub_data=lambda w, input: f"--hub-data {shlex_quote(input.hub_data)}" if input.hub_data else "",
    output:
        directory(res("corpora", "{corpus}")),
    log:
        res("logs", "prepare_corpus", "{corpus}.log"),
    benchmark:
        res("benchmarks", "prepare_corpus", "{corpus}.tsv")
    conda:
        "../envs/data.yaml"
    resources:
        mem_mb=JOBS.data.mem_mb,
        runtime=JOBS.data.runtime,
    shell:
        "python -m attention_geometry prepare-corpus --no-progress --config {input.config:q} {params.hub_data} "
        "--out {output:q} > {log:q} 2>&1"


# Image sets (the ViT runs' data): config -> IMAGES.yaml -> a prepared set with a stratified held-out split
# (attention-geometry prepare-images; docs/data.md, "Image sets"). The digits are scikit-learn's own file,
# offline; a hub dataset (CIFAR-10) is fetched at its pinned revision by fetch_image_data and read offline.
rule write_image_config:
    output:
        res("configs", "images", "{images}.yaml"),
    params:
        text=lambda w: yaml_text(IMAGES[w.images]),
    log:
        res("logs", "configs", "images-{images}.log"),
    conda:
        "../envs/data.yaml"
    shell:
        WRITE_TEXT


rule write_image_fetch_config:
    output:
        res("configs", "fetch", "images", "{images}.yaml"),
    params:
        text=lambda w: yaml_text(IMAGE_FETCH[w.images]),
    log:
        res("logs", "configs", "fetch-images-{images}.log"),
    wildcard_constraints:
        images=alternation(IMAGE_FETCH),
    conda:
        "../envs/data.yaml"
    shell:
        WRITE_TEXT


rule fetch_image_data:
    input:
        config=res("configs", "fetch", "images", "{images}.yaml"),
    output:
        directory(res("hub-data", "images", "{images}")),
    log:
        res("logs", "fetch_image_data", "{images}.log"),
    wildcard_constraints:
        images=alternation(IMAGE_FETCH),
    conda:
        "../envs/data.yaml"
    params:
        online=ONLINE_ENV,  # the hub on again, for this command only
    shell:
        "{params.online} python -m attention_geometry fetch-hub-data --no-progress --config {input.config:q} "
        "--out {output:q} > {log:q} 2>&1"


rule prepare_images:
    input:
        config=res("configs", "images", "{images}.yaml"),
        hub_data=lambda w: res("hub-data", "images", w.images) if w.images in IMAGE_FETCH else [],
    params:
        hub_data=lambda w, input: f"--hub-data {shlex_quote(input.hub_data)}" if input.hub_data else "",
    output:
        directory(res("images", "{images}")),
    log:
        res("logs", "prepare_images", "{images}.log"),
    benchmark:
        res("benchmarks", "prepare_images", "{images}.tsv")
    conda:
        "../envs/data.yaml"
    resources:
        mem_mb=JOBS.data.mem_mb,
        runtime=JOBS.data.runtime,
    shell:
        "python -m attention_geometry prepare-images --no-progress --config {input.config:q} {params.hub_data} "
        "--out {output:q} > {log:q} 2>&1"
