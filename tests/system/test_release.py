"""The release as a user gets it: one version everywhere, and a wheel that installs into a fresh virtual
environment and runs without the checkout (templates, static files, migrations and scenarios inside it)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

from app import __version__
from tests.support.checkpoints import make_draft
from tests.support.harness import ROOT, chromium_path, cli, free_port

pytestmark = pytest.mark.release


def test_version_is_defined_once_and_reported_everywhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"], "the version lives only in app/__init__.py"
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "app.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assert cli("--version").stdout.strip() == f"specwatch {__version__}"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(__version__)}\b", changelog, re.M), "CHANGELOG.md lacks this version"


def _build(out: Path) -> tuple[Path, Path]:
    # build isolation fetches the build backend (setuptools) like any user's build would
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("specwatch-*.whl")
    (sdist,) = out.glob("specwatch-*.tar.gz")
    return wheel, sdist


def _fresh_venv(where: Path) -> Path:
    """A new virtual environment that sees the test environment's dependencies (no network, seconds) but not
    this checkout: specwatch itself can only come from the wheel."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "_deps_from_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return env


# two isolated builds, a venv, the demo and a browser from the wheel: minutes on a loaded machine
@pytest.mark.timeout(900)
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    wheel, sdist = _build(tmp_path / "dist")
    assert wheel.name == f"specwatch-{__version__}-py3-none-any.whl"

    names = set(zipfile.ZipFile(wheel).namelist())
    assert not any(n.startswith("migrations/") for n in names), "no top-level 'migrations' package"
    for directory in ("migrations", "templates", "static"):
        shipped = sorted(
            p.relative_to(ROOT).as_posix()
            for p in (ROOT / directory).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        )
        missing = [p for p in shipped if f"app/{p}" not in names]
        assert not missing, f"not in the wheel: {missing[:5]}"
    scenarios = sorted(p.name for p in (ROOT / "agents" / "sim" / "scenarios").glob("*.toml"))
    assert scenarios and all(f"agents/sim/scenarios/{s}" in names for s in scenarios)
    with tarfile.open(sdist) as tar:
        sdist_names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"migrations/env.py", "setup.py", "CHANGELOG.md", "MANIFEST.in"} <= sdist_names

    venv = tmp_path / "venv"
    python = _fresh_venv(venv)
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel)],
        check=True,
        timeout=300,
        env=_clean_env(venv),
        cwd=tmp_path,
    )
    env, run_dir = _clean_env(venv), tmp_path / "elsewhere"
    run_dir.mkdir()

    def specwatch(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(venv / "bin" / "specwatch"), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=run_dir,
            timeout=120,
        )
        assert not check or proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    where = subprocess.run(
        [python, "-c", "import app, agents; print(app.__file__); print(agents.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=run_dir,
        check=True,
    ).stdout
    assert str(ROOT) not in where and all(line.startswith(str(venv)) for line in where.split())

    assert specwatch("--version").stdout.strip() == f"specwatch {__version__}"
    help_text = specwatch("--help").stdout
    for command in ("serve", "token", "db", "backup", "demo", "check-draft"):
        assert command in help_text

    good, bad = make_draft(tmp_path / "draft-ok"), make_draft(tmp_path / "draft-bad", layout="layers")
    assert "no problems found" in specwatch("check-draft", str(good)).stdout
    dropped = specwatch("check-draft", str(bad), "--engine-version", "0.5.6", check=False)
    assert dropped.returncode == 2 and "`layers.0.*` → `midlayer.*`" in dropped.stdout

    url = f"sqlite:///{tmp_path / 'installed.db'}"
    assert "upgraded empty -> " in specwatch("db", "upgrade", "--database-url", url).stdout
    assert "up to date" in specwatch("db", "current", "--database-url", url).stdout

    port = free_port()
    demo = subprocess.Popen(
        [str(venv / "bin" / "specwatch"), "demo", "--duration", "600", "--port", str(port)],
        env={**env, "SPECWATCH_DATA_DIR": str(tmp_path / "demo-data")},
        cwd=run_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        health, hosts = _poll_demo(base, demo)
        assert health["status"] == "ok" and health["version"] == __version__
        assert {h["name"] for h in hosts} >= {"gpu-node-01"}, "the demo's simulated hosts reported"
        page = httpx.get(base + "/", timeout=30)  # templates from inside the wheel
        assert page.status_code == 200 and "gpu-node-01" in page.text
        css = httpx.get(base + "/static/" + _first_static_css(), timeout=30)  # static files from the wheel
        assert css.status_code == 200 and css.text.strip()
        _every_page_in_chromium(base)
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=60) == 0
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


def _poll_demo(base: str, demo: subprocess.Popen[str]) -> tuple[dict[str, object], list[dict[str, object]]]:
    deadline = time.time() + 60
    while time.time() < deadline:
        if demo.poll() is not None:
            raise AssertionError(
                f"demo exited early ({demo.returncode}):\n{demo.stdout.read() if demo.stdout else ''}"
            )
        try:
            health = httpx.get(base + "/healthz", timeout=2).json()
            hosts = httpx.get(base + "/api/v1/hosts", timeout=5).json()
            # agents' batches commit in any order (group commit): wait for the host the page is checked for
            if any(h["name"] == "gpu-node-01" for h in hosts):
                return health, hosts
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("the installed demo never served data within 60 s")


def _first_static_css() -> str:
    css = sorted((ROOT / "static").rglob("*.css"))
    assert css, "the dashboard ships a stylesheet"
    return css[0].relative_to(ROOT / "static").as_posix()


def _page_paths(base: str) -> list[str]:
    """Every page and HTML partial the dashboard serves (read from the routers, so a new page is covered),
    with ids of a launch and an incident the demo has stored."""
    from app.web.acceptance import router as acceptance_router
    from app.web.pages import router as pages_router

    launch_id = httpx.get(base + "/api/v1/launches", timeout=30).json()[0]["id"]
    paths = []
    for route in [*pages_router.routes, *acceptance_router.routes]:
        path = getattr(route, "path", "")
        if "GET" not in getattr(route, "methods", set()) or path.startswith("/api/") or "." in path:
            continue
        paths.append(path.replace("{launch_id}", str(launch_id)))
    return paths


def _every_page_in_chromium(base: str) -> None:
    """The installed wheel serves every page and partial to a real browser: no 5xx on any request (the page's
    own fetches included), no console error, no page error."""
    from playwright.sync_api import sync_playwright

    deadline = time.time() + 120
    while time.time() < deadline:  # the deadlock act's incident, so the incident page has one to show
        open_incidents = httpx.get(base + "/api/v1/incidents", timeout=30).json()
        if open_incidents:
            break
        time.sleep(2)
    assert open_incidents, "the demo opened no incident within two minutes"
    paths = [p.replace("{incident_id}", str(open_incidents[0]["id"])) for p in _page_paths(base)]
    assert "/" in paths and any(p.endswith("/acceptance") for p in paths), paths
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        # every 5xx fails; a 4xx is named too, as the console error it also causes does not say which URL
        page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        for path in paths:
            resp = page.goto(base + path, wait_until="networkidle")
            assert resp is not None and resp.status == 200, f"{path}: {resp.status if resp else 'no answer'}"
            page.wait_for_timeout(300)  # the page's own fetches (timeline, acceptance panel) land
        browser.close()
    assert problems == [], problems


# The server's stack: none of it may load on a GPU host that runs only the agent (`pip install specwatch`).
SERVER_STACK = (
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "jinja2",
    "uvicorn",
    "psycopg",
    "sse_starlette",
)
# what the agent loads when it runs: the entry point, then every module `specwatch agent` can start
AGENT_CLOSURE = """
import sys
from app.cli.main import build_parser
build_parser(["agent", "--help"])
import agents.main, agents.shipper, agents.launcher, agents.simulate, agents.sim
import agents.collectors.nvml, agents.collectors.procs, agents.collectors.logs, agents.collectors.engine_metrics
import agents.collectors.stacks, agents.collectors.ras, agents.preflight.source, agents.spool.store
print(" ".join(sorted({m.partition(".")[0] for m in sys.modules})))
"""
# the agent-only install, without uninstalling anything: the server's packages cannot be imported
WITHOUT_SERVER = f"""
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {SERVER_STACK!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
from app.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_agents_import_closure_holds_none_of_the_server_stack() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", AGENT_CLOSURE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=120,
    ).stdout.split()
    assert "agents" in loaded and "psutil" in loaded
    assert [m for m in SERVER_STACK if m in loaded] == []


def test_without_the_server_packages_the_agent_runs_and_the_server_commands_say_what_to_install() -> None:
    def specwatch(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", WITHOUT_SERVER, *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )

    agent = specwatch("agent", "--help")
    assert agent.returncode == 0 and "--server" in agent.stdout, agent.stderr
    overview = specwatch("--help")
    assert overview.returncode == 0, overview.stderr
    assert "agent" in overview.stdout and "specwatch[server]" in overview.stdout
    serve = specwatch("serve")
    assert serve.returncode == 2 and "pip install 'specwatch[server]'" in serve.stderr, serve.stderr


def test_the_agent_is_the_bare_package_and_the_server_an_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=\[ ;]", d)[0].lower() for d in project["dependencies"]}
    assert {"psutil", "nvidia-ml-py", "httpx"} <= names
    assert names.isdisjoint({"fastapi", "sqlalchemy", "jinja2", "alembic", "uvicorn", "psycopg"})
    server = {re.split(r"[<>=\[ ;]", d)[0].lower() for d in project["optional-dependencies"]["server"]}
    assert {"fastapi", "sqlalchemy", "jinja2", "alembic", "uvicorn"} <= server
    assert project["scripts"]["specwatch-agent"] == "app.cli.main:agent_main"


def test_a_foreign_top_level_agents_package_is_named_not_crashed_on(tmp_path: Path) -> None:
    # what installing the openai-agents SDK next to specwatch does: its `agents` package in place of ours
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text("from agents.run import Runner  # the SDK's own\n")
    (tmp_path / "agents" / "run.py").write_text("class Runner: ...\n")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); from app.cli.main import main; sys.exit(main())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "agent", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "is not specwatch's" in proc.stderr and "virtual environment of its own" in proc.stderr
