"""Schema 3: an ``evidence`` column (kernelgen.ir.values.Evidence) that best() ranks on before time.

Existing rows are classified from their stored record (the measurement message), so a database tuned by
an older kernelgen dispatches its confirmed winners, not its luckiest search trial.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from kernelgen.ir.values import Evidence

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

BEST_COLUMNS_OLD = ["workload_key", "target_fingerprint", "status", "time_median", "record_id"]
BEST_COLUMNS = ["workload_key", "target_fingerprint", "status", "evidence", "time_median", "record_id"]


def upgrade() -> None:
    with op.batch_alter_table("kernelgen_records") as batch:
        batch.add_column(sa.Column("evidence", sa.Integer(), nullable=False, server_default=str(int(Evidence.TRIAL))))
    records = sa.table("kernelgen_records", sa.column("record_id"), sa.column("data"), sa.column("status"),
                       sa.column("evidence"))
    conn = op.get_bind()
    # Only ok rows matter to best(); failures keep the default.
    rows = conn.execute(sa.select(records.c.record_id, records.c.data).where(records.c.status == "ok")).all()
    updates = [{"rid": rid, "ev": int(Evidence.of(json.loads(data)["measurement"].get("message", "")))}
               for rid, data in rows]
    updates = [u for u in updates if u["ev"] != int(Evidence.TRIAL)]
    if updates:
        conn.execute(records.update().where(records.c.record_id == sa.bindparam("rid"))
                     .values(evidence=sa.bindparam("ev")), updates)
    op.drop_index("ix_kgrec_best", table_name="kernelgen_records")
    op.create_index("ix_kgrec_best", "kernelgen_records", BEST_COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_kgrec_best", table_name="kernelgen_records")
    with op.batch_alter_table("kernelgen_records") as batch:
        batch.drop_column("evidence")
    op.create_index("ix_kgrec_best", "kernelgen_records", BEST_COLUMNS_OLD)
