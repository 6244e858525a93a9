"""The baselines the papers compare against, one module per family.

Rigid FIFO (:mod:`.fifo`), SRTF/SRSF (:mod:`.shortest_first`), SJF (:mod:`.sjf`),
Tiresias-L and its upstream loop (:mod:`.tiresias`, :mod:`.tiresias_upstream`,
:mod:`.gittins`), Themis (:mod:`.themis` with :mod:`.themis_rho` and :mod:`.themis_state`),
Max-Min (:mod:`.maxmin`), Gavel's Max-Min-Perf (:mod:`.maxmin_perf`), Optimus
(:mod:`.optimus`), AFS's SRTF-E/SRSF-E (:mod:`.altruistic`) and max-GPU variants
(:mod:`.max_gpus`), Slurm-like first-fit placement (:mod:`.first_fit`) and the offline
optimum (:mod:`.offline_optimal`). Their names are declared in ``policies/__init__.py``.
"""
