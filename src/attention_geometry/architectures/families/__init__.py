"""Family entries, one module per group; importing this package registers them all.

Adding a family = one `register(Family(...))` entry in the module of its group (and its proof test in
tests/). See registry.Stack for the fields; the modules here import only registry.py.
"""

from attention_geometry.architectures.families import audio, seq2seq, text, vision  # noqa: F401
