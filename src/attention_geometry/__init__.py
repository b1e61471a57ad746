"""attention_geometry: symmetry and directionality of self-attention's bilinear form W_qk.

Reproduces and extends Saponati et al., "The underlying structures of self-attention" (ICML 2025).
"""

__version__ = "0.1.0"
