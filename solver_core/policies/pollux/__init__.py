"""Pollux (OSDI'21, a peer system): goodput-optimised co-adaptive scheduling.

:mod:`.pollux` is the entry module (``pollux``): each job's batch size chosen together with its
GPU count so that goodput (throughput x statistical efficiency) is maximised; the per-job
goodput model lives in ``models/goodput.py``. See ``docs/algorithms/pollux.md``.
"""
