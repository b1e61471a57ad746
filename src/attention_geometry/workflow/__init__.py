"""What the Snakemake workflow asks of the package at parse time and in its small jobs; torch-free.

plan.py         config -> Plan (runs, groups, snapshot steps, pretrained sources, notebook I/O)
records.py      the config parts behind each committed result, and the check that stops on another config
pretrained.py   `pretrained:` entries -> files to read, score arguments, provenance (CLI `join-parts`)
concat.py       CLI `concat-tables`
provenance.py   package versions and the machine, for the report
"""
