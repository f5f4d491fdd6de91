"""Lab 06 (accelerate dispatch): device maps planned on the meta device, and the real dispatch error with its fixes.

``planner`` builds models without memory and plans with accelerate's own ``infer_auto_device_map``;
``figure`` draws a plan; ``loading`` loads the real SmolLM2 in 8/4 bits and triggers and fixes the error;
``replay`` replays a dry run on a device map (what GPU 0 holds when modules live on the cpu).
"""

from vramlab.dispatch.planner import *  # noqa: F401,F403
from vramlab.dispatch.figure import *  # noqa: F401,F403
from vramlab.dispatch.loading import *  # noqa: F401,F403
from vramlab.dispatch.replay import *  # noqa: F401,F403
