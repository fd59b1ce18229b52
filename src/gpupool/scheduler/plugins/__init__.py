"""Policies as small plugins: each implements a hook type of ``scheduler/hooks.py`` and is
registered by name in a table of ``scheduler/registry.py``, the one place that imports them."""
