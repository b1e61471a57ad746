"""What the Snakemake workflow asks of the package at parse time and in its small jobs; torch-free.

plan.py         config -> Plan (runs, groups, snapshot steps, pretrained sources, notebook I/O, the typed
                config sections the rules read)
runs.py         config training.groups -> the runs (Run), CONFIG_KEY, the update runs
jobs.py         how the jobs run (Jobs: resources, SLURM, the trainer's launch and device), shell_prefix
records.py      the config parts behind each committed result, and the check that stops on another config;
                the input-sums records (CLI `input-sums`, `record-corpus`)
keep.py         the last good committed outputs, kept aside at parse time and put back after a failed job
pretrained.py   `pretrained:` entries -> files to read, score arguments, provenance (CLI `join-parts`,
                `locate-package`)
concat.py       CLI `concat-tables`
show_run.py     CLI `show-run`: a planned run's settings from the config alone, before its corpus exists
notebook.py     CLI `run-notebook`: papermill for the notebook rules, a failing cell as one error line
provenance.py   package versions and the machine, for the report
"""
