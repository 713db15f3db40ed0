from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.harness import (
    RECEIVER_ALLOW_ENV,
    STARTED_SERVERS,
    PgDatabases,
    ServerProcess,
    agent_token,
    pg_available,
    unavailable,
)

# httpx waits 5 s for an answer by default. The suite runs four workers of real servers, agents, torch ranks
# and Chromium on two cores, where a page render or a login can take longer than that at the busiest moments
# (a ReadTimeout in test_access at load average 9): the tests assert what a request answers, not how fast
# (latency has its own benchmarks), so a request that sets no timeout of its own gets 30 s. Set through each
# call's keyword default (its ``__kwdefaults__``), httpx's public signature: an explicit timeout still wins.
SUITE_HTTP_TIMEOUT = httpx.Timeout(30.0)
for _call in (
    httpx.request,
    httpx.get,
    httpx.post,
    httpx.put,
    httpx.patch,
    httpx.delete,
    httpx.Client.__init__,
):
    if _call.__kwdefaults__ and "timeout" in _call.__kwdefaults__:
        _call.__kwdefaults__["timeout"] = SUITE_HTTP_TIMEOUT


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="run long soak variants")


# The longest modules (a minute or more of real time each): started first, they end while the short tests
# run, rather than forming a tail on one worker once the others are idle.
LONG_FIRST = (
    "tests/system/test_failover.py",
    "tests/system/test_release.py",
    "tests/system/test_torch_jobs.py",
    "tests/system/test_demo.py",
    "tests/system/test_detector_server.py",
    "tests/system/test_live_vs_replay.py",
    "tests/system/test_web_data.py",
    "tests/system/test_ingest_http.py",
    "tests/system/test_ingest_group.py",
)


# the shared servers in an auth mode of their own (see SharedServers)
AUTH_SHARED = {"shared_token_server", "shared_proxy_server"}


def _start_order(item: pytest.Item) -> int:
    path = item.nodeid.split("::")[0]
    if path in LONG_FIRST:
        return LONG_FIRST.index(path)
    return len(LONG_FIRST) + (0 if path.startswith("tests/system/") else 1)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_start_order)  # stable: a module's own order stays
    # A module fixture (a site of servers, agents and torchrun jobs) is built once per worker that runs a
    # test of its module: one group keeps the module on one worker, built once, its tests in their order (a
    # module's last test may check what the earlier ones left, such as the dashboard's screenshots).
    grouped = set()
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info and any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs):
            grouped.add(item.nodeid.split("::")[0])
    for item in items:
        if item.nodeid.split("::")[0] in grouped:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        elif AUTH_SHARED & set(getattr(item, "fixturenames", ())):
            # one worker for the tests of the token- and proxy-mode shared servers: spread over every worker,
            # each would start its own pair, more starts than the dozen tests had on servers of their own
            item.add_marker(pytest.mark.xdist_group("shared-auth-servers"))
    if config.getoption("--run-slow"):
        return
    # The soaks (up to 30 min each) are not part of the suite people and CI run: deselected, not skipped, so
    # no test of the suite ever reports "skipped" under CI=true. `make soak` runs them.
    soaks = [item for item in items if "slow" in item.keywords]
    if soaks:
        config.hook.pytest_deselected(items=soaks)
        items[:] = [item for item in items if "slow" not in item.keywords]


class _LoadGroupCheck:
    """pytest-xdist tells its loadgroup scheduler an item's group by a suffix on the item's node id. Under
    pytest 9.2 that suffix is written to a field pytest no longer reads (pytest-xdist#1386), and every group
    above is silently ignored: a module fixture (five torchrun jobs, a site of servers and agents) is built again
    on each worker that runs one of its tests. pyproject.toml keeps pytest below 9.2 until xdist is fixed; this
    stops a run whose groups are lost, instead of letting it cost the suite minutes without a word."""

    def __init__(self) -> None:
        self.lost: set[str] = set()

    @pytest.hookimpl(trylast=True)  # after xdist's own hook, which writes the suffix
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if getattr(config.option, "loadgroup", False):  # set in the workers of --dist loadgroup only
            self.lost = {
                i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid
            }

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # a failure each grouped test reports (an error raised in a worker's collection shows no message)
        if item.nodeid in self.lost:
            pytest.fail(
                f"--dist loadgroup does not group under pytest {pytest.__version__} (pytest-xdist#1386): "
                "install the dev extra's pytest (make setup)",
                pytrace=False,
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_LoadGroupCheck(), "specwatch-loadgroup-check")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test shows the end of the log of each server it started: in CI that log is the only trace
    of what the server saw (a 503's cause, a job that failed)."""
    report = yield
    if report.failed and call.when != "setup":
        for server in STARTED_SERVERS:
            tail = server.output()[-6000:]
            report.sections.append((f"server log ({server.base_url}, last 6000 characters)", tail))
    if call.when == "teardown":
        STARTED_SERVERS.clear()
    return report


@pytest.fixture(scope="session")
def pg() -> Iterator[PgDatabases]:
    problem = pg_available()
    if problem:
        unavailable(f"PostgreSQL ({problem})")
    dbs = PgDatabases()
    yield dbs
    dbs.drop_all()


def _sqlite_url(tmp_path: Path, migrated: bool) -> str:
    from app.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    if migrated:
        upgrade(url)
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, migrated database on each backend in turn."""
    if request.param == "sqlite":
        return _sqlite_url(tmp_path, migrated=True)
    pg: PgDatabases = request.getfixturevalue("pg")
    return pg.fresh()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database with no schema, on each backend in turn."""
    if request.param == "sqlite":
        return _sqlite_url(tmp_path, migrated=False)
    pg: PgDatabases = request.getfixturevalue("pg")
    return pg.fresh(migrated=False)


@pytest.fixture
def token_server(db_url: str) -> Iterator[ServerProcess]:
    """A server whose API takes bearer tokens (the access tests' mode)."""
    srv = ServerProcess(db_url, env={"SPECWATCH_AUTH": "token"}).start()
    yield srv
    srv.stop()


@pytest.fixture
def server(db_url: str) -> Iterator[ServerProcess]:
    """A real `specwatch serve` process on each backend."""
    srv = ServerProcess(db_url).start()
    yield srv
    srv.stop()


class SharedServers:
    """One real server per backend and auth mode for each pytest worker, started when a test first asks for it
    and stopped when the worker ends. For tests that only check the answers to what they send and the rows they
    add (counted before and after, or picked out by names of their own): a server start costs a couple of
    seconds of CPU, and a parametrized refusal test would otherwise start one for each of its cases."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.running: dict[tuple[str, str], ServerProcess] = {}

    def get(self, backend: str, pg: PgDatabases | None, auth: str = "none") -> ServerProcess:
        key = (backend, auth)
        if key not in self.running:
            if pg is not None:
                url = pg.fresh()
            else:
                (self.tmp / auth).mkdir()
                url = _sqlite_url(self.tmp / auth, migrated=True)
            # the receivers its tests add (tests/system/test_security_network.py) run on loopback
            env = {**RECEIVER_ALLOW_ENV, **({} if auth == "none" else {"SPECWATCH_AUTH": auth})}
            self.running[key] = ServerProcess(url, env=env).start()
        server = self.running[key]
        STARTED_SERVERS.append(server)  # its log tail goes with a failing test's report, like any server's
        return server

    def stop(self) -> None:
        for server in self.running.values():
            server.stop()


@pytest.fixture(scope="session")
def _shared_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServers]:
    shared = SharedServers(tmp_path_factory.mktemp("shared-server"))
    yield shared
    shared.stop()


def _shared(request: pytest.FixtureRequest, auth: str) -> ServerProcess:
    pg = request.getfixturevalue("pg") if request.param == "postgres" else None
    shared: SharedServers = request.getfixturevalue("_shared_servers")
    return shared.get(request.param, pg, auth)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_server(request: pytest.FixtureRequest) -> ServerProcess:
    """A running server on each backend in turn, shared with the worker's other tests that ask for it (see
    SharedServers): its ``database_url`` is not fresh, so count what a test adds, not what is there."""
    return _shared(request, "none")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_token_server(request: pytest.FixtureRequest) -> ServerProcess:
    """Like ``shared_server``, in the bearer-token mode of ``token_server``: users a test adds need names of
    their own (``unique``), since an earlier test's users are still there."""
    return _shared(request, "token")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_proxy_server(request: pytest.FixtureRequest) -> ServerProcess:
    """Like ``shared_server``, in reverse-proxy mode with the proxy on loopback (the default)."""
    return _shared(request, "proxy")


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Names of a test's own on a shared server (hosts, users, deployments): ``unique("gpu-node")``."""
    tag = uuid.uuid4().hex[:8]
    return lambda name: f"{name}-{tag}"


@pytest.fixture
def make_token(db_url: str):  # type: ignore[no-untyped-def]
    def make(host: str) -> str:
        return agent_token(db_url, host)

    return make
