"""Labs 01 and 02 (QuaRot): activation outliers, Hadamard rotations, and 4-bit weights, activations and KV cache.

``hadamard`` builds and applies Hadamard matrices (fast Walsh-Hadamard transform); ``rotate`` folds and
rotates a LLaMA-style model without changing its function; ``outliers`` measures activation outliers and
plots them; ``explorer`` is lab 01's widget (one token's activation at any layer, before and after
rotation); ``quant`` fake-quantizes weights (RTN, GPTQ), activations and the KV cache and reads the
cached QuaRot table; ``attention`` is the attention function that quantizes K and V on the way in;
``blocks`` holds lab 01's capstone tools (a block-diagonal online Hadamard, its cost, the INT4 error it leaves);
``mixed_bits`` gives each decoder layer 4 or 8 bits under a byte budget and scores a plan live (lab 02's capstone).
"""

from vramlab.quarot import hadamard, rotate, butterfly, outliers, quant, explorer, mixed_bits  # noqa: F401
