"""GPU probes: NVML on machines with NVIDIA GPUs, a fake that says it is simulated elsewhere."""
