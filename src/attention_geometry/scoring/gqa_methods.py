"""The ways a grouped-query layer's W_qk can be scored, named without torch, so that the CLI's `--gqa-method`
choices (commands.py) answer `--help` at once: "correct", the matrix the attention computes (extract.wqk), and
"paper", the paper's expansion, a known error reproduced for comparison (paper_gqa.py)."""

__all__ = ["GQA_METHODS"]

GQA_METHODS = ("correct", "paper")
