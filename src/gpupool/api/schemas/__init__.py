"""Request and response models: the HTTP contract, separate from domain types and tables."""
