"""On-disk formats, one home each (docs/contracts.md); torch-free.

files.py        the one atomic writer (bytes, text, tables, directory swap and rotation), the one YAML
                reader, sha256, a folder's checksums.json, the pid lock
columns.py      the data contracts' column lists (score, run, loss, update tables)
corpus.py       the prepared corpus: Corpus, load_corpus, the manifest, the committed corpus record
rundir.py       the run directory: run names, step-XXXXXXX snapshots, run.yaml, the snapshot steps
checkout.py     code_version: the git commit of a checkout, which every record of what ran names
packages.py     files inside installed packages: the `pkg:PACKAGE/PATH` spec, locating them, their sha256
value_kinds.py  the value kinds every config reader checks (config/schema.yaml mirrors them)
"""
