"""AFS / CoDDL (paper 000): apportioning GPUs by marginal throughput gain.

:mod:`.afs` is the entry module (AFS-L, AFS-P, AFS-S, declared in ``policies/__init__.py``);
:mod:`.afs_l_fast` is the fast AFS-L, :mod:`.afs_job` what the algorithms see of a job, and
:mod:`.afs_reference` the literal Algorithm 1 the tests hold the fast code to. The paper's
baselines (Tiresias-L, Max-Min, Optimus, Themis, SRTF-E/SRSF-E, max-GPU variants) are in
``policies/baselines/``; the packing and reuse placements in ``solver_core/placement/``.
"""
