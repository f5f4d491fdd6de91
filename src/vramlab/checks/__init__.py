"""Exercise checks. Each prints what is wrong (never the answer) and returns a CheckResult.

The answer comes only on request: ``check_x(answer, reveal=True)`` or ``reveal("lab03", 2)`` (lab id,
exercise number); the result then has ``revealed=True``.

Checks for each lab live in their own module (``lab00`` ...) and are re-exported here, so a
notebook writes ``from vramlab.checks import check_fp16_weight_bytes``.
"""

from vramlab.checks._core import CheckResult, learners_or_package, report, reveal  # noqa: F401
from vramlab.checks.lab00 import *  # noqa: F401,F403
from vramlab.checks.lab03 import *  # noqa: F401,F403
from vramlab.checks.lab04 import *  # noqa: F401,F403
from vramlab.checks.lab02 import *  # noqa: F401,F403
from vramlab.checks.lab01 import *  # noqa: F401,F403
from vramlab.checks.lab08 import *  # noqa: F401,F403
from vramlab.checks.lab06 import *  # noqa: F401,F403
from vramlab.checks.lab07 import *  # noqa: F401,F403
from vramlab.checks.lab05 import *  # noqa: F401,F403
from vramlab.checks.lab09 import *  # noqa: F401,F403
