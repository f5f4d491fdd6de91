"""Lab 05 (MLA): a Multi-head Latent Attention layer, its latent cache, and SmolLM2 converted to a latent KV cache.

``config`` reads the geometry from a DeepSeek config; ``cache`` is the latent cache (contiguous or paged);
``layer`` is the attention (naive and absorbed); ``conversion`` factors a GQA model's K/V through a latent;
``ranks`` gives each layer of a converted model its own latent rank (a plan under a cache budget);
``latent_attention`` runs the converted model from its latents, with ``W_UV`` absorbed.
"""

from vramlab.mla.config import *  # noqa: F401,F403
from vramlab.mla.cache import *  # noqa: F401,F403
from vramlab.mla.layer import *  # noqa: F401,F403
from vramlab.mla.conversion import *  # noqa: F401,F403
from vramlab.mla.ranks import *  # noqa: F401,F403
from vramlab.mla.latent_attention import *  # noqa: F401,F403
