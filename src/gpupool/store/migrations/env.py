"""Alembic environment: always run against the connection gpupool hands in."""

from __future__ import annotations

from alembic import context

from gpupool.store.orm import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("gpupool runs its migrations itself at start-up (gpupool up); see store/db.py")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
