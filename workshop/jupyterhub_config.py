"""JupyterHub config for a vramlab workshop room: N learners on one machine's shared GPUs.

Start it with `vramlab workshop serve --learners 30` (installs what is missing, fetches the model
once into the shared read-only cache, prints the URL and the passwords), or by hand:

    VRAMLAB_WORKSHOP_LEARNERS=30 VRAMLAB_WORKSHOP_DIR=/srv/vramlab-room \
    VRAMLAB_WORKSHOP_PASSWORD=<8+ chars> VRAMLAB_WORKSHOP_ADMIN_PASSWORD=<32+ chars> \
    jupyterhub -f workshop/jupyterhub_config.py

What it sets (all the logic is in src/vramlab/workshop/room.py, `configure`, unit-tested there):
* authenticator: JupyterHub's SharedPasswordAuthenticator ("shared-password", JupyterHub >= 5.1):
  learners pick any name with the room password; `instructor` logs in with the admin password.
* spawner: SimpleLocalProcessSpawner ("simple"): every server runs as the hub's Unix user with
  HOME=<room>/homes/<name>; no accounts to create, no isolation (a one-day room on a throwaway
  machine only). Real rooms: SystemUserSpawner/DockerSpawner, or Kubernetes: workshop/z2jh/.
* pre_spawn_hook: copies labs/ into ~/vramlab-labs on first start; sets VRAMLAB_GPU_FRACTION,
  CUDA_VISIBLE_DEVICES (round robin over `nvidia-smi -L`, MIG UUIDs when present),
  VRAMLAB_CACHE=<room>/cache (shared, read-only) and VRAMLAB_PROGRESS_DIR=<room>/progress.
* services: jupyterhub-idle-culler (1 h idle), and `progress` at /services/progress (admins only).
"""

from vramlab.workshop import configure_from_env

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file
configure_from_env(c)
