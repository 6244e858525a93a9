"""Policies: each paper's and baseline's decisions, the registry, placement, wrappers."""
