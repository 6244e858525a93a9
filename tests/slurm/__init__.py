"""The Slurm executor, the controller, its journal and the job_submit.lua hook (real Slurm lab)."""
