# Corpora: config -> CORPUS.yaml -> tokenized blocks (attention-geometry prepare-corpus).


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


# Paths outside the workflow (a Jigsaw CSV, text files) are not rule inputs, so a dry run of the paper
# config passes anywhere; prepare-corpus checks them when this rule runs and stops with one clear line.
# Their content is a parameter (`path sha256` per file, workflow.Plan.corpus_inputs): input text that
# changed re-runs this rule (and what depends on the corpus) instead of "nothing to do".
rule prepare_corpus:
    input:
        config=res("configs", "corpora", "{corpus}.yaml"),
    params:
        inputs=lambda w: PLAN.corpus_inputs(w.corpus),
    output:
        directory(res("corpora", "{corpus}")),
    log:
        res("logs", "prepare_corpus", "{corpus}.log"),
    benchmark:
        res("benchmarks", "prepare_corpus", "{corpus}.tsv")
    conda:
        "../envs/data.yaml"
    resources:
        mem_mb=config["data"]["mem_mb"],
        runtime=config["data"]["runtime"],
    shell:
        "python -m attention_geometry prepare-corpus --no-progress --config {input.config:q} --out {output:q} > {log:q} 2>&1"


# Image sets (the ViT runs' data): config -> IMAGES.yaml -> a prepared set with a stratified held-out split
# (attention-geometry prepare-images; docs/data.md, "Image sets"). The digits are scikit-learn's own file,
# offline; a hub dataset (CIFAR-10) is read at its pinned revision.
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


rule prepare_images:
    input:
        config=res("configs", "images", "{images}.yaml"),
    output:
        directory(res("images", "{images}")),
    log:
        res("logs", "prepare_images", "{images}.log"),
    benchmark:
        res("benchmarks", "prepare_images", "{images}.tsv")
    conda:
        "../envs/data.yaml"
    resources:
        mem_mb=config["data"]["mem_mb"],
        runtime=config["data"]["runtime"],
    shell:
        "python -m attention_geometry prepare-images --no-progress --config {input.config:q} --out {output:q} > {log:q} 2>&1"
