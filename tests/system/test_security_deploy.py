"""Issue 32, finding 4: the compose deployment publishes the dashboard and nothing else; Grafana needs a
password chosen by the operator and a sign-in; Prometheus cannot be stopped by whoever reaches it; /metrics is
not served through the proxy. The proxy part runs the repository's nginx site file in a real nginx in front
of a real server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.harness import ROOT, ServerProcess, upgrade_db
from tests.support.nginx import nginx


def _services() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return data["services"]


def test_only_the_dashboard_is_published() -> None:
    published = {name for name, svc in _services().items() if svc.get("ports")}
    assert published == {"proxy"}, f"published besides the dashboard's proxy: {published - {'proxy'}}"


def test_grafana_needs_a_chosen_password_and_a_sign_in() -> None:
    env = _services()["grafana"]["environment"]
    password = env["GF_SECURITY_ADMIN_PASSWORD"]
    # ${VAR:?message}: compose refuses to start without it; ${VAR:-default} would be a well-known password
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", password), password
    assert str(env.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "false"
    assert "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env


def test_prometheus_has_no_lifecycle_api() -> None:
    command = " ".join(_services()["prometheus"].get("command", []))
    assert "--web.enable-lifecycle" not in command and "--web.enable-admin-api" not in command


def test_metrics_are_refused_through_the_proxy_and_the_dashboard_is_not(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    # as compose runs the servers: /metrics open for the Prometheus on the compose network
    server = ServerProcess(db_url, env={"SPECWATCH_PUBLIC_METRICS": "true"}).start()
    try:
        with nginx(tmp_path / "nginx", server.base_url.removeprefix("http://")) as proxy:
            assert httpx.get(server.base_url + "/metrics", timeout=10).status_code == 200
            outside = httpx.get(proxy + "/metrics", timeout=10)
            assert outside.status_code == 403 and "specwatch_" not in outside.text
            assert httpx.get(proxy + "/", timeout=10).status_code == 200
            # Grafana sits behind the same port; the dashboard stays up while Grafana is not there at all
            assert httpx.get(proxy + "/grafana/", timeout=10).status_code == 502
            assert httpx.get(proxy + "/healthz", timeout=10).status_code == 200
    finally:
        server.stop()
