"""Tables to claims and figures; torch-free (the notebooks import these).

stats.py         intervals, exact p-values, the verdict rule, the horizon statistic, the signed speed-up
claims.py        claims.csv: the claims table as the pre-registrations list them, its inputs, settings and text
claim_effects.py each claim's effect on its units and the paper's figure on the same unit
study_design.py  each claim's declared arms and pairing, the arm names (pandas-free; the plan reads it)
claim_rules.py   an effect to its row: statistics, Holm within families, the verdict rules
completeness.py  the tidy tables the claims read hold exactly the rows the plan expects, every design claim tested
paper_claims.py  the paper's own figure for each claim on the same unit
power.py         a pre-registered study's sample size: each claim's probability to hold under its own rule
summaries.py     summaries over layers, loss contrasts, Table 1
symmetry_speedup.py per ablation run: symmetry vs loss gain and speed-up, their Spearman correlations
figdata.py       data behind figures made by rules (Figure 1's W_qk, the symmetry/speed-up table)
figure_frames.py each notebook figure's data frame: the grouping, joins and seed pairing the notebooks draw from
gqa.py           the grouped-query table per model, beside the paper's published scores
plotting.py      figure style; save() refuses overlapping legends
"""
