"""What runs on every node: GPU discovery, process launch with isolation, logs, exits."""
