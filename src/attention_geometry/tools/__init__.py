"""The paper's structures as tools for anyone's training: any supported transformers model, any Trainer.

inits.py     symmetric_init(model, mode): the four initializations of the project's runs (standard, symmetric,
             symmetric-fresh, fresh) on a model of any supported family, through the scorer's family registry
callback.py  SymmetryCallback: per-layer symmetry and directionality (and their medians) in a Trainer's logs
             every N steps; symmetry_logs(model): the same values as one dict
"""
