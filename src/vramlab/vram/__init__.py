"""Lab 08 (watching VRAM): the live monitor and widget, the memory ledger, the caching allocator, the OOM message.

``monitor`` samples memory in a thread; ``widget`` shows it live; ``ledger`` accounts for a model's bytes;
``allocator`` models and runs the CUDA caching allocator; ``oom_message`` reads PyTorch's OOM message;
``dryrun`` records every allocation of a real forward on the meta device (no GPU needed); ``kernels`` says
what the GPU kernels it stands in for allocate, by PyTorch release (SDPA choice, the math path, cuBLAS).
"""

from vramlab.vram.oom_message import *  # noqa: F401,F403
from vramlab.vram.monitor import *  # noqa: F401,F403
from vramlab.vram.widget import *  # noqa: F401,F403
from vramlab.vram.ledger import *  # noqa: F401,F403
from vramlab.vram.allocator import *  # noqa: F401,F403
from vramlab.vram.dryrun import *  # noqa: F401,F403
