"""mldebug: a terminal debugging assistant for multi-rank PyTorch training.

This module stays import-light: it is loaded inside every training rank by the hooks.
"""

__version__ = "0.1.0"
