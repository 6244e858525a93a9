"""The engine, the simulated cluster, the GPU ledger, metrics, reasons and the restart gate."""
