"""Executor backends: where workers run. ``local`` (embedded, virtual nodes) and ``ray`` (a node
runtime actor per Ray node); the table that names them is ``gpupool/backends.py``."""
