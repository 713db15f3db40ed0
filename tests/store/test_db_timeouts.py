"""PostgreSQL connections are bounded in time: a database host that takes the TCP connection and never
answers (a hung server, a half-dead proxy) fails a connect within seconds instead of holding a pool slot, a
request or a background job for as long as the kernel keeps the socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app.store.db import PG_CONNECT_DEFAULTS, make_engine


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections (the kernel completes the handshake) and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@pytest.mark.timeout(120)
def test_a_database_that_never_answers_fails_the_connect_instead_of_hanging(silent_server: int) -> None:
    engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{silent_server}/specwatch")
    try:
        with pytest.raises(OperationalError, match="timeout"):  # without a timeout: waits forever
            engine.connect()
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_connections_carry_the_timeouts_and_the_url_overrides_them(pg) -> None:
    url = pg.fresh(migrated=False)
    for engine_url, want_timeout in (
        (url, PG_CONNECT_DEFAULTS["connect_timeout"]),
        (url + "?connect_timeout=3", 3),
    ):
        engine = make_engine(engine_url)
        try:
            with engine.connect() as conn:
                assert conn.execute(text("SELECT 1")).scalar_one() == 1
                params = conn.connection.driver_connection.info.get_parameters()
        finally:
            engine.dispose()
        assert params["connect_timeout"] == str(want_timeout)
        assert params["keepalives_idle"] == str(PG_CONNECT_DEFAULTS["keepalives_idle"])
        assert params["tcp_user_timeout"] == str(PG_CONNECT_DEFAULTS["tcp_user_timeout"])
