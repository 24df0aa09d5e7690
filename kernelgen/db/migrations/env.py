"""Alembic environment of the tuning database.

kernelgen runs migrations programmatically (``kernelgen.db.schema``) and passes an open connection in
``config.attributes["connection"]``; the plain ``alembic`` command also works with ``-x url=URL``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from kernelgen.db.models import VERSION_TABLE, Base

config = context.config


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, version_table=VERSION_TABLE,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("pass the database: alembic -x url=sqlite:///path/to/tuning.sqlite upgrade head")
    engine = create_engine(url)
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()
