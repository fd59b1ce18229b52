"""Policies as small plugins, registered explicitly in tables: the job order and the placement
in ``scheduler/registry.py`` (the session calls them), the queue order, quota check and hold-up
in ``scheduler/policies.py`` (allocate calls them)."""
