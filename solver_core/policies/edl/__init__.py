"""EDL (paper 003): elastic deep learning in multi-tenant GPU clusters.

:mod:`.edl` is the entry module (``edl-elastic``, the §6.3 synthetic-workload policy);
:mod:`.elastic_tiresias` is Algorithm 1 (``elastic-tiresias``: Tiresias-L plus compaction and
expansion). EDL's mechanisms are not policies and stay with the executors that carry them out:
stragglers in ``executors/simulator/stragglers.py``, the dynamic data pipeline in
``executors/data_pipeline.py``, in-place resize over SSH in ``executors/ssh/inplace.py``.
"""
