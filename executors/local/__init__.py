"""The single-server executor: the SSH executor's sidecars and agent on this machine, without
sshd, driven by a small daemon with its own journal (``gpuplan server``; docs/single-server.md).
"""
