"""one stop reason instead of four flags: jobs.stop_reason replaces cancel_requested,
preempt_requested, timed_out and preempted

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 23:30:00.000000

Each row's flags become the one reason they meant (``domain.outcome.StopReason``):
timed out -> ``timeout`` (it outranked a cancel); cancel asked, or cancelled -> ``cancel``;
preemption asked, or waiting again after one -> ``idle`` when the job was held back
(``not_before``, only idle preemptions set it), else ``preempt``.

Plain ``op.add_column`` and ``op.drop_column``, never ``batch_alter_table`` (see 0002): SQLite
from 3.35 drops these columns in place, without rebuilding ``jobs`` and so without emptying
``workers`` and ``events`` through ON DELETE CASCADE.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

FLAGS = ("cancel_requested", "preempt_requested", "timed_out", "preempted")

jobs = sa.table(
    "jobs",
    sa.column("state", sa.String),
    sa.column("stop_reason", sa.String),
    sa.column("not_before", sa.DateTime),
    *(sa.column(flag, sa.Boolean) for flag in FLAGS),
)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("stop_reason", sa.String(length=16), nullable=True))
    unset = jobs.c.stop_reason.is_(None)
    held = sa.case((jobs.c.not_before.is_not(None), "idle"), else_="preempt")
    op.execute(jobs.update().where(jobs.c.timed_out == sa.true()).values(stop_reason="timeout"))
    op.execute(
        jobs.update()
        .where(unset, sa.or_(jobs.c.cancel_requested == sa.true(), jobs.c.state == "cancelled"))
        .values(stop_reason="cancel")
    )
    op.execute(
        jobs.update()
        .where(unset, sa.or_(jobs.c.preempt_requested == sa.true(), jobs.c.preempted == sa.true()))
        .values(stop_reason=held)
    )
    for flag in FLAGS:
        op.drop_column("jobs", flag)


def downgrade() -> None:
    for flag in FLAGS:
        op.add_column("jobs", sa.Column(flag, sa.Boolean(), nullable=False, server_default=sa.false()))
    active = jobs.c.state.in_(("starting", "running"))
    requeuing = jobs.c.stop_reason.in_(("preempt", "idle"))
    op.execute(jobs.update().where(jobs.c.stop_reason == "timeout").values(timed_out=True, cancel_requested=active))
    op.execute(jobs.update().where(jobs.c.stop_reason == "cancel", active).values(cancel_requested=True))
    op.execute(jobs.update().where(requeuing, active).values(preempt_requested=True))
    op.execute(jobs.update().where(requeuing, jobs.c.state == "pending").values(preempted=True))
    op.drop_column("jobs", "stop_reason")
