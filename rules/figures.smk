# One rule per notebook of notebooks/catalog.yaml (a new figure or table is one catalog entry plus its
# notebook). Each rule runs
#   papermill notebooks/NAME.ipynb {results}/notebooks/NAME.ipynb -y '{"inputs": ..., "outputs": ..., "params": ...}'
# The notebook file is an input of its own rule only, so editing it re-runs just that figure. The final
# figures and tables are report() outputs with the catalog's caption (`snakemake --report report.html`).


rule write_caption:
    output:
        res("report", "captions", "{notebook}.rst"),
    params:
        text=lambda w: CATALOG[w.notebook]["caption"].strip() + "\n",
    log:
        res("logs", "captions", "{notebook}.log"),
    conda:
        "../envs/figures.yaml"
    shell:
        WRITE_TEXT


for _nb in NOTEBOOKS:
    _parameters, _deps, _outputs = notebook_io(_nb)
    _caption = os.path.abspath(res("report", "captions", f"{_nb}.rst"))

    rule:
        name:
            f"make_{_nb}"
        input:
            notebook=os.path.join("notebooks", f"{_nb}.ipynb"),
            **_deps,
        output:
            executed=res("notebooks", f"{_nb}.ipynb"),
            **{
                key: report(path, caption=_caption, category=report_category(path), subcategory=_nb)
                for key, path in _outputs.items()
            },
        params:
            parameters=json.dumps(_parameters, sort_keys=True),
        log:
            res("logs", "notebooks", f"{_nb}.log"),
        conda:
            "../envs/figures.yaml"
        shell:
            "papermill {input.notebook} {output.executed} -y {params.parameters:q} --log-output"
            " --no-progress-bar > {log} 2>&1"
