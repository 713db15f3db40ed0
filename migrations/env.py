from __future__ import annotations

from alembic import context

from app.jobs.partitions import is_partition_name
from app.store.db import make_engine
from app.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url, "sqlalchemy.url must be set"
    engine = make_engine(url)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            # the daily partitions of the time-series tables are the server's, not the schema's (0008)
            include_name=lambda name, type_, _parent: (
                not (type_ == "table" and is_partition_name(name or ""))
            ),
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations()
