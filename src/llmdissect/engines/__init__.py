"""Engines: what wraps a model for data parallelism and sharding (single, DDP, FSDP2, ...)."""
