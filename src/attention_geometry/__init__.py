"""attention_geometry: symmetry and directionality of self-attention's bilinear form W_qk.

Reproduces and extends Saponati et al., "The underlying structures of self-attention" (ICML 2025). One
subpackage per part of the design (docs/DESIGN.md; each one's docstring lists its modules):

formats/        on-disk formats, one home each (torch-free)
architectures/  where each model family keeps its q/k weights (torch-free)
weights/        where q/k tensors come from: local folders, safetensors, .bin, GGUF, the hub
scoring/        from weights to W_qk and its scores; the null, the updates
data/           corpora and image sets prepared into what the trainer reads
training/       BERT encoders and decoders, and ViT classifiers, trained from scratch
workflow/       what the Snakemake workflow asks of the package (torch-free)
analysis/       tables to claims and figures (torch-free; the notebooks import these)
tools/          the structures as tools for anyone's training (inits, a Trainer callback)
cli.py          the `attention-geometry` dispatcher: the table of subcommands
commands.py     the arguments of every subcommand (torch-free)
errors.py       UserError (one `error:` line, exit status 2) and ConfigError
__main__.py     `python -m attention_geometry`
"""

__version__ = "0.1.0"
