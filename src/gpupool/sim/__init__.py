"""Trace-driven simulation: replay a job trace through the same ``schedule()`` on a virtual clock."""
