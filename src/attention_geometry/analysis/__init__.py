"""Tables to claims and figures; torch-free (the notebooks import these).

stats.py         intervals, exact p-values, the verdict rule, the horizon statistic, the signed speed-up
claims.py        claims.csv: each claim on its unit, paired by seed
paper_claims.py  the paper's own figure for each claim on the same unit
summaries.py     summaries over layers, loss contrasts, Table 1
figdata.py       data behind figures made by rules (Figure 1's W_qk, the symmetry/speed-up table)
figure_frames.py each notebook figure's data frame: the grouping, joins and seed pairing the notebooks draw from
gqa.py           the grouped-query table per model, beside the paper's published scores
plotting.py      figure style; save() refuses overlapping legends
"""
