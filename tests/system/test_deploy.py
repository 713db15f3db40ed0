"""The deployment files in deploy/, compose.yaml and the Dockerfile, checked the way their own tools would
(promtool, systemd-analyze, `docker compose config` where an engine-less client can), and against what a real
specwatch server actually exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.settings import Settings
from tests.support.harness import ROOT, ServerProcess, cli, make_batch, unavailable

DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "specwatch.json"
SERVERS = ("specwatch-1", "specwatch-2")
LONG_RUNNING = ("postgres", *SERVERS, "proxy", "prometheus", "grafana")


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return data


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        unavailable(name)
    assert path is not None
    return path


def test_compose_wires_every_service_with_health_and_restart() -> None:
    services = _compose()["services"]
    assert set(LONG_RUNNING) | {"migrate"} <= set(services)
    for name in LONG_RUNNING:
        svc = services[name]
        assert svc.get("restart") in ("unless-stopped", "always"), f"{name} is not restarted"
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no health check"
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}) or {}:
            assert dep in services, f"{name} depends on unknown service {dep}"
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which is not in the repository"
    # servers start only after the one-shot migration, which waits for a healthy database
    for name in SERVERS:
        svc = services[name]
        assert svc["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert "@postgres:5432/" in svc["environment"]["SPECWATCH_DATABASE_URL"]
        assert "/healthz" in " ".join(svc["healthcheck"]["test"])
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["proxy"]["depends_on"] == {s: {"condition": "service_healthy"} for s in SERVERS}


def test_proxy_balances_exactly_the_servers_and_streams_live_updates() -> None:
    conf = (DEPLOY / "nginx" / "specwatch.conf").read_text()
    upstream = re.search(r"upstream specwatch \{(.*?)\}", conf, re.S)
    assert upstream is not None
    assert re.findall(r"server ([\w-]+):8000", upstream.group(1)) == list(SERVERS)
    stream = re.search(r"location = /api/v1/stream \{(.*?)\}", conf, re.S)
    assert stream is not None and "proxy_buffering off" in stream.group(1)
    size = re.search(r"client_max_body_size (\d+)m;", conf)
    assert size is not None and int(size.group(1)) * 2**20 >= Settings().max_body_bytes


def test_dockerfile_builds_the_wheel_and_runs_unprivileged_with_a_health_check() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert (
        "python -m build --wheel" in text and 'pip install "$(echo /tmp/*.whl)[server]"' in text
    )  # the server: the wheel with its extra
    assert re.search(r"^USER specwatch$", text, re.M) and "HEALTHCHECK" in text and "/healthz" in text
    assert 'ENTRYPOINT ["specwatch"]' in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_prometheus_config_and_rules_pass_promtool(tmp_path: Path) -> None:
    promtool = _tool("promtool")
    services = _compose()["services"]
    mounts = dict(v.split(":")[:2] for v in services["prometheus"]["volumes"] if v.startswith("./"))
    # lay the files out as the container sees them, so promtool also loads the mounted rule files
    for source, target in mounts.items():
        dest = tmp_path / Path(target).relative_to("/etc/prometheus")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source, dest)
    rules = list((tmp_path / "rules").glob("*.yml"))
    assert rules, "compose mounts specwatch's alert rules into Prometheus"
    proc = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout or "rules found" in proc.stdout
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "specwatch"]
    assert job["static_configs"][0]["targets"] == [f"{s}:8000" for s in SERVERS]


def _dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["query"]["query"] for v in dashboard["templating"]["list"]]
    return queries


def test_grafana_dashboard_structure_and_promql_syntax(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    datasources = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"]
    uid = datasources[0]["uid"]
    assert datasources[0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "dashboards" / "specwatch.yml").read_text()
    )
    grafana = _compose()["services"]["grafana"]
    assert (
        f"./deploy/grafana/dashboards:{provider['providers'][0]['options']['path']}:ro" in grafana["volumes"]
    )

    panels = dashboard["panels"]
    assert dashboard["uid"] == "specwatch" and len({p["id"] for p in panels}) == len(panels)
    titles = {p["title"] for p in panels}
    for wanted in ("Rank phase", "Seconds since progress", "Acceptance length", "GPU utilisation"):
        assert wanted in titles
    for p in panels:
        x, w = p["gridPos"]["x"], p["gridPos"]["w"]
        assert x >= 0 and x + w <= 24, f"{p['title']} runs off the grid"
        targets = p.get("targets", [])
        assert p["type"] == "row" or targets, f"{p['title']} has no query"
        assert len({t["refId"] for t in targets}) == len(targets)
        for t in targets:
            assert t["datasource"]["uid"] == uid, f"{p['title']} queries another data source"
    phase = next(p for p in panels if p["title"] == "Rank phase")
    mapped = {m["text"] for m in phase["fieldConfig"]["defaults"]["mappings"][0]["options"].values()}
    assert {"loading_weights", "cuda_graph_capture", "serving", "stalled", "crashed"} <= mapped

    # every query parses as PromQL: promtool checks them as recording rules (template variables filled in)
    exprs = [q for q in _dashboard_queries(dashboard) if not q.startswith("label_values(")]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"dashboard:query{i}",
                        "expr": e.replace("$deployment", ".*").replace("$host", ".*"),
                    }
                    for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    proc = subprocess.run([_tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_metric_the_dashboard_and_rules_use_is_exported(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'metrics.db'}"
    cli("db", "upgrade", "--database-url", url)
    token = cli("token", "create", "--host", "gpu-node-01", "--database-url", url).stdout.strip()
    server = ServerProcess(url).start()
    try:
        httpx.post(
            server.base_url + "/api/v1/ingest",
            json=make_batch(),
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        ).raise_for_status()
        scrape = httpx.get(server.base_url + "/metrics", timeout=30)
    finally:
        server.stop()
    assert scrape.status_code == 200, "specwatch serves /metrics"
    exported: set[str] = set()
    for family in text_string_to_metric_families(scrape.text):
        exported.add(family.name)
        exported.update(s.name for s in family.samples)
        if family.type == "counter":
            exported.add(family.name + "_total")
        if family.type in ("summary", "histogram"):
            exported.update(family.name + suffix for suffix in ("_sum", "_count", "_bucket"))

    used: dict[str, set[str]] = {}
    for query in _dashboard_queries(json.loads(DASHBOARD.read_text())):
        for name in re.findall(r"\b(specwatch_[a-z0-9_]+)\b", query):
            used.setdefault(name, set()).add("grafana dashboard")
    for rules_file in (ROOT / "docs" / "prometheus").glob("*rules*.yml"):
        for name in re.findall(r"\b(specwatch_[a-z0-9_]+)\b", rules_file.read_text()):
            used.setdefault(name, set()).add(rules_file.name)
    assert len(used) >= 10
    unknown = {name: sorted(where) for name, where in used.items() if name not in exported}
    assert not unknown, f"queried but not exported by specwatch: {unknown}"


def test_agent_unit_passes_systemd_analyze_and_keeps_what_the_agent_needs(tmp_path: Path) -> None:
    analyze = _tool("systemd-analyze")
    unit = (DEPLOY / "systemd" / "specwatch-agent.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#")
    )
    assert settings["Restart"] == "always" and settings["EnvironmentFile"] == "/etc/specwatch/agent.env"
    assert settings["ProtectSystem"] == "strict" and settings["NoNewPrivileges"] == "yes"
    # hardening must not hide the engine from the agent: every process in /proc, NVML's device nodes
    assert "ProcessSubset" not in settings and settings.get("ProtectProc", "default") == "default"
    assert "PrivateDevices" not in settings and "char-nvidia-frontend rw" in unit
    assert settings["StateDirectory"] == "specwatch/agent" and "--spool /var/lib/specwatch/agent" in unit

    example = (DEPLOY / "systemd" / "agent.env.example").read_text()
    defined = set(re.findall(r"^([A-Z_]+)=", example, re.M))
    used = set(re.findall(r"\$\{?([A-Z_]+)\}?", unit.split("ExecStart=", 1)[1].split("\nRestart=")[0]))
    assert used <= defined, f"the example environment file lacks {used - defined}"
    assert "SPECWATCH_TOKEN" in defined

    # systemd-analyze wants the binary and environment file to exist: point them at stand-ins
    standin = tmp_path / "specwatch-agent.service"
    standin.write_text(
        unit.replace("/opt/specwatch/bin/specwatch", "/bin/true").replace(
            "EnvironmentFile=/etc/specwatch/agent.env", f"EnvironmentFile={tmp_path / 'agent.env'}"
        )
    )
    (tmp_path / "agent.env").write_text(example)
    proc = subprocess.run([analyze, "verify", str(standin)], capture_output=True, text=True)
    complaints = [line for line in proc.stderr.splitlines() if standin.name in line]
    assert proc.returncode == 0 and not complaints, proc.stderr
