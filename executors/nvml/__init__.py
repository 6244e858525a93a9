"""GPU inventory and health from NVML (issue 26).

``records``: NVML answers (as the SSH agent sends them) -> typed per-GPU records and a health
verdict with its reason, a pure function. ``local``: the same answers read on this machine.
``crosscheck``: the answers against the declared inventory (an SSH node's ``Node``, a Slurm
node's GRES). Nothing here needs nvidia-ml-py unless NVML is actually read on this machine.
"""
