"""gpupool: pool the GPUs of many machines into one shared cluster."""

__version__ = "0.1.0"
