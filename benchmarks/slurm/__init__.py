"""A throw-away Slurm cluster on this machine, for side-by-side benchmarks (see cluster.py)."""
