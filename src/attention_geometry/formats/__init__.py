"""On-disk formats, one home each (docs/contracts.md); torch-free.

files.py        the one atomic writer (bytes, text, tables, directory swap and rotation), the one YAML
                reader, sha256, a folder's checksums.json, the pid lock
columns.py      the data contracts' column lists (score, run, loss, update tables)
corpus.py       the prepared corpus: Corpus, load_corpus, the manifest, the committed corpus record
rundir.py       the run directory: run names, step-XXXXXXX snapshots, run.yaml, the snapshot steps
value_kinds.py  the value kinds every config reader checks (config/schema.yaml mirrors them)
"""
