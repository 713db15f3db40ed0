"""A real nginx in front of real specwatch servers, from the repository's own site file (deploy/nginx/), with
its upstream pointed at the test's servers and its port at a free one."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.harness import ROOT, free_port, unavailable, wait_http

SITE = ROOT / "deploy" / "nginx" / "specwatch.conf"


@contextmanager
def nginx(workdir: Path, upstream: str, site: str | None = None) -> Iterator[str]:
    """nginx serving ``site`` (default: deploy/nginx/specwatch.conf) with every ``specwatch-N:8000`` upstream
    replaced by ``upstream`` (host:port); yields its base URL."""
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if binary is None:
        unavailable("nginx (apt-get install nginx-light)")
    assert binary is not None
    port = free_port()
    text = site if site is not None else SITE.read_text()
    text = text.replace("listen 80;", f"listen 127.0.0.1:{port};")
    for n in (1, 2):
        text = text.replace(f"specwatch-{n}:8000", upstream)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "site.conf").write_text(text)
    temps = " ".join(
        f"{k}_temp_path {workdir / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # as root, nginx's workers drop to nobody, who cannot read a test's files (an htpasswd in its tmp_path)
    user = "user root;\n" if os.geteuid() == 0 else ""
    (workdir / "nginx.conf").write_text(
        f"{user}pid {workdir / 'nginx.pid'};\nerror_log stderr;\nevents {{}}\n"
        f"http {{ access_log off; {temps} include {workdir / 'site.conf'}; }}\n"
    )
    proc = subprocess.Popen(
        [binary, "-p", str(workdir), "-c", str(workdir / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/healthz", timeout=20, proc=proc)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
