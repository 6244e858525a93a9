"""The Slurm lab: munged, slurmctld and slurmd daemons on this machine (test support)."""
