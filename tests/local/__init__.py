"""The single-server executor (gpuplan server / submit / cancel)."""
