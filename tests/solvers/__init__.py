"""``gpuplan solve``'s problems and the solver backends (MIP/CP models, OJPP packing)."""
