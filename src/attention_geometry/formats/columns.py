"""The columns of the contract tables (docs/contracts.md), each list written once.

Every writer and reader of these tables imports its columns from here. Plain lists, in the order the tables
hold them (a caller that needs another list builds a new one; nothing here is to be changed in place).
No torch, no pandas: the workflow and the notebooks import this module too.
"""

from __future__ import annotations

__all__ = [
    "SCORES",
    "SCORE_COLUMNS",
    "MATRICES",
    "MATRIX_COLUMN",
    "with_matrix_column",
    "RUN_KEYS",
    "RUN_COLUMNS",
    "TRAINING_COLUMNS",
    "LOSS_COLUMNS",
    "IMAGE_LOSS_COLUMNS",
    "TABLE_OPTIONAL_COLUMNS",
    "UPDATE_COLUMNS",
    "UPDATE_KINDS",
    "TABLE_COLUMNS",
    "GQA_COLUMNS",
    "PROVENANCE_COLUMNS",
    "PROVENANCE_HOST_COLUMNS",
    "PROVENANCE_SPEED_COLUMNS",
]

# the two scores, in the paper's convention (docs/contracts.md, "Scores")
SCORES = ["symmetry", "directionality"]

# one row per self-attention layer (and head) of a model: `score`, pretrained_scores.csv
SCORE_COLUMNS = [
    "model",
    "model_type",
    "architecture",
    "modality",
    "component",
    "layer",
    "head",
    *SCORES,
    "n_params",
    "d_model",
    "n_heads",
    "n_kv_heads",
]

# the matrices a score row can be of (`score --matrix`, scorer.score_model's `matrix`): W_qk (the contract's tables)
# and the OV circuit sum_h W_o,h W_v,g(h) (docs/contracts.md, "Matrix convention")
MATRICES = ("qk", "ov")
# a table that holds OV rows names each row's matrix in this column, after `head`; a table of W_qk alone has none
# (its columns are the contract's, unchanged)
MATRIX_COLUMN = "matrix"


def with_matrix_column(columns: list[str]) -> list[str]:
    """`columns` (a score table's: SCORE_COLUMNS, TRAINING_COLUMNS) with MATRIX_COLUMN after `head`."""
    at = columns.index("head") + 1
    return [*columns[:at], MATRIX_COLUMN, *columns[at:]]


# what identifies a training run besides its name (run names: rundir.run_name)
RUN_KEYS = ["size", "dataset", "objective", "init", "seed"]

# the columns that place a row in a run and a step of it
RUN_COLUMNS = ["run", *RUN_KEYS, "step"]

# `score-checkpoints`, training_scores.csv
TRAINING_COLUMNS = SCORE_COLUMNS + RUN_COLUMNS

# the trainer's loss.csv, training_loss.csv (eval_loss empty where not evaluated)
LOSS_COLUMNS = RUN_COLUMNS + ["train_loss", "eval_loss", "learning_rate"]
# an image classifier's loss.csv: the same columns plus the held-out accuracy (empty where not evaluated); the
# text runs' loss.csv has LOSS_COLUMNS only (docs/contracts.md, "Loss rows")
IMAGE_LOSS_COLUMNS = LOSS_COLUMNS + ["eval_accuracy"]

# `score-updates`, update_scores.csv
UPDATE_KINDS = ["gradient", "applied"]
UPDATE_COLUMNS = RUN_COLUMNS + ["layer", "kind", *SCORES]

# `compare-gqa`, gqa_paper_method.csv: per grouped-query layer, s and d of the attention's W_qk and of the paper's
# grouped-query expansion (scoring/paper_gqa.py), and the relative Frobenius distance between the two matrices
GQA_COLUMNS = [
    "model",
    "component",
    "layer",
    "n_heads",
    "n_kv_heads",
    *SCORES,
    "symmetry_paper",
    "directionality_paper",
    "relative_distance",
]

# a run's provenance.csv, run_provenance.csv: one row each time the trainer started or resumed a run, with the
# steps it went on to train, the git commit of the code (`+ uncommitted changes` where the checkout differed from
# it) and the CPU it ran on (training/run_provenance.py: record_provenance)
PROVENANCE_COLUMNS = ["run", "started_utc", "from_step", "to_step", "code_version", "cpu"]
# and, in the rows written since study 4 (issue 60), what tells hosts apart: the CPU flags that change a float's
# result or a step's speed (training/run_provenance.py: NUMERIC_CPU_FLAGS) and a host id (a hash of the machine id and
# the boot id: two rows with one id ran on one host within one boot). A record begun before them keeps its six
# columns (a resumed run appends what its header has); a gathered table leaves them empty for such rows.
PROVENANCE_HOST_COLUMNS = ["cpu_flags", "host_id"]
# and, since the one update (issue 57), how fast the start's steps ran: the positions per second and the model FLOP
# utilization (training/cost.py) over the updates it ran, filled in when it ends (done or stopped; empty where it
# was killed). A record begun before them keeps the columns its header has.
PROVENANCE_SPEED_COLUMNS = ["tokens_per_s", "mfu"]

# table kind (`concat-tables --kind`) -> its required columns
TABLE_COLUMNS: dict[str, list[str]] = {
    "pretrained_scores": SCORE_COLUMNS,
    "training_scores": TRAINING_COLUMNS,
    "training_loss": LOSS_COLUMNS,
    "update_scores": UPDATE_COLUMNS,
    "run_provenance": PROVENANCE_COLUMNS,
}

# table kind -> columns some of its inputs have and others lack (left empty where lacking): a training_loss
# table of text and image runs has the image runs' eval_accuracy, empty in the text runs' rows
TABLE_OPTIONAL_COLUMNS: dict[str, list[str]] = {
    "training_loss": ["eval_accuracy"],
    "run_provenance": PROVENANCE_HOST_COLUMNS + PROVENANCE_SPEED_COLUMNS,
}
