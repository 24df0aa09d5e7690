"""Schema 5: ``kernelgen_leases``, leases on tuning work (a model's region, a study's confirmation) that lapse
unless their holder renews them, so a stopped or hung holder does not keep its work for ever
(``kernelgen.db.leases``). Records are untouched.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kernelgen_leases",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("kernelgen_leases")
