"""Model architectures: where each model family keeps its self-attention q/k weights (torch-free).

registry.py  Family / Stack / register, the table they fill, ExtractionError and UnsupportedArchitecture
families/    one register(Family(...)) per model_type: text, seq2seq, vision, audio
keys.py      get_family, stack_info, qk_keys, ov_keys, architecture_of: a model's family, its stacks' sizes from
             its config, and every applied layer's q/k (and value / output projection) tensor names

Below both weights/ (which tensors to read or fetch) and scoring/ (the tensors into W_qk), which ask it alike.
"""
