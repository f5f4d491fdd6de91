"""Labs 03 and 04 (serving): KV-cache sizes, vLLM's memory plan and start-up errors, the paged block manager, OOM log
triage, the real engine.

``kvcache`` sizes a KV cache from a config; ``vllm_memory`` computes the ledger vLLM computes at start-up and
its messages; ``paged`` simulates the block manager under a burst; ``triage`` reads a vLLM/PyTorch log and
names the failure and its fixes; ``profile_run`` computes vLLM's profile-run activation peak by dry run;
``engine`` runs the real vLLM in its own environment, in a subprocess (``from vramlab.serving import engine``; its
names are not star-exported: its ``Request`` is not ``paged.Request``); ``recorded`` gives the labs the engine's
runs live, or replayed from ``results/vllm/`` where no engine is installed.
"""

from vramlab.serving.kvcache import *  # noqa: F401,F403
from vramlab.serving.vllm_memory import *  # noqa: F401,F403
from vramlab.serving.paged import *  # noqa: F401,F403
from vramlab.serving.triage import *  # noqa: F401,F403
from vramlab.serving.profile_run import *  # noqa: F401,F403
from vramlab.serving import engine  # noqa: F401,E402
