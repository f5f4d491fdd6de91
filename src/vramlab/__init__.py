"""vramlab: an interactive Jupyter lab on GPU memory for LLM inference.

Every submodule imports without a GPU. The notebooks in ``notebooks/`` call into this package;
the learner versions in ``labs/`` are generated from them (``python -m vramlab.labs build``).
"""

__version__ = "0.1.0"
