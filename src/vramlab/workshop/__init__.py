"""The workshop room (instructor-led runs of labs 00-08): JupyterHub serving the labs to many learners.

``room`` holds the hub's decisions (validation, GPU listing, the round-robin GPU share per learner, the
JupyterHub config, ``vramlab workshop serve``); ``board`` is the instructors-only progress service at
``/services/progress``. The outcomes it shows are recorded by :mod:`vramlab.progress`.
"""

from vramlab.workshop.room import *  # noqa: F401,F403
