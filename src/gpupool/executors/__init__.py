"""Executor backends: where workers run. ``local`` (embedded, virtual nodes) now; ``ray`` later."""
