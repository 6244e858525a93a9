"""Trace loaders, profiles, scenario files, workloads and interference tables."""
