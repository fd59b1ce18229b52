"""The imperative shell: load a snapshot, call the pure scheduler, apply its decisions."""
