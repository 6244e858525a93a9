#!/bin/sh
# gpuplan EpilogSlurmctld hook: tell `gpuplan slurm-controller` that a job has ended.
#
# Install: copy to the slurmctld host (e.g. /usr/local/lib/gpuplan/epilog_wake.sh, mode 0755,
# owned by root), set `EpilogSlurmctld=` to it in slurm.conf, create the directory of WAKE_FILE
# writable by SlurmUser (e.g. `install -d -o slurm -m 0755 /run/gpuplan`), and start the
# controller with `--wake-file` naming the same file.
#
# Why: the controller learns that GPUs were freed by polling `squeue` every --interval seconds,
# so without this hook freed GPUs sit idle for half an interval on average before the next job
# is released. slurmctld runs this script (as SlurmUser) when any job ends; it rewrites one small
# file and the controller, which watches that file's modification time, polls at once. The poll
# stays the source of truth: a lost or spurious wake-up only moves a poll earlier.
#
# It must stay trivial: no Slurm commands (they would call back into slurmctld), no network,
# always exit 0 (a failing EpilogSlurmctld is only logged, but there is no reason to fail).
WAKE_FILE=/run/gpuplan/wake
{ printf '%s\n' "${SLURM_JOB_ID:-}" > "$WAKE_FILE"; } 2>/dev/null
exit 0
