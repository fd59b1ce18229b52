"""Use cases shared by the API (and through it the CLI): submit, cancel, read, explain."""
