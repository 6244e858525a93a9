"""The SSH lab: sshd daemons on this machine standing for nodes (test support)."""
