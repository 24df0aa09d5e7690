"""Schema 2: an index for nearest()'s neighbouring-shape lookup (same graph, same target).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_kgrec_neighbours", "kernelgen_records", ["workload_family", "target_fingerprint", "status"])


def downgrade() -> None:
    op.drop_index("ix_kgrec_neighbours", table_name="kernelgen_records")
