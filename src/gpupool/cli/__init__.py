"""The ``gpupool`` command: Typer for parsing, Rich for people, ``-o json`` for scripts."""
