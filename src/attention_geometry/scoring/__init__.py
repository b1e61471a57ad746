"""From weights to scores: W_qk per layer, its symmetry and directionality.

measures.py          symmetry(M), directionality(M): float64, batched over [..., d, d]
extract.py           iter_layer_qk, wqk(layer, per_head): the bilinear form per layer (and head), from the q/k
                     tensors that architectures/ names; iter_layer_ov: the OV circuit W_o W_v the same way
paper_gqa.py         the paper's grouped-query expansion, reproduced (`--gqa-method paper`)
gqa_methods.py       GQA_METHODS: correct, paper (torch-free: the CLI's choices)
scorer.py            score_model, score_checkpoints (CLI `score`, `score-checkpoints`)
random_init_null.py  untrained models of a run's shape (CLI `score-null`)
updates.py           dL/dW_qk and the applied updates of a run (CLI `score-updates`)
"""
