"""Schema 4: a ``name`` column, the workload's human name (manifest ``name`` or ``module.qualname``).

Rows of older databases keep NULL: their records carry no name, and every query treats a missing name as
"unnamed" (they are still found by workload key). Nothing is rewritten.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kernelgen_records") as batch:
        batch.add_column(sa.Column("name", sa.String(255), nullable=True))
    op.create_index("ix_kgrec_name", "kernelgen_records", ["name"])


def downgrade() -> None:
    op.drop_index("ix_kgrec_name", table_name="kernelgen_records")
    with op.batch_alter_table("kernelgen_records") as batch:
        batch.drop_column("name")
