"""Policies as small plugins, registered explicitly in ``scheduler/registry.py``."""
