"""Ordered phases of a cycle, one module each."""
