"""Alembic migrations of the tuning database (own version table: ``kernelgen_alembic_version``)."""
