"""SideCar (paper 004): progress-aware reshaping of elastic jobs.

:mod:`.sidecar` is the entry module (Alg. 1 reshaping down, Alg. 2 reshaping up);
:mod:`.sidecar_model` its training-time predictions and per-host books,
:mod:`.sidecar_accuracy` the accuracy-target length predictor, and :mod:`.sidecar_baselines`
the paper's ``k8s-default`` and ``termination`` baselines.
"""
