"""The SSH executor, its agent, NVML inventory, the stand-in job and EDL's data pipeline."""
