"""Schema 1: the records table with the indexes best() and records() need.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kernelgen_records",
        sa.Column("record_id", sa.String(64), primary_key=True),
        sa.Column("workload_key", sa.String(128), nullable=False),
        sa.Column("workload_family", sa.String(128), nullable=False),
        sa.Column("implementation", sa.String(255), nullable=False),
        sa.Column("implementation_hash", sa.String(128), nullable=False),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("target_fingerprint", sa.String(128), nullable=False),
        sa.Column("target_family", sa.String(255), nullable=False),
        sa.Column("toolchain_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("time_median", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("kernelgen_version", sa.String(64), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
    )
    op.create_index("ix_kgrec_best", "kernelgen_records",
                    ["workload_key", "target_fingerprint", "status", "time_median", "record_id"])
    op.create_index("ix_kgrec_workload_family_target", "kernelgen_records", ["workload_key", "target_family"])
    op.create_index("ix_kgrec_created", "kernelgen_records", ["created_at"])


def downgrade() -> None:
    op.drop_table("kernelgen_records")
