"""Every API endpoint fuzzed from the OpenAPI schema with schemathesis against a real server process:
no 5xx, whatever the input. The number of cases run is printed (pytest -s) and asserted non-trivial."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import ServerProcess, cli

MAX_EXAMPLES = os.environ.get("SPECWATCH_FUZZ_EXAMPLES", "25")
# Receivers are excluded: the server would POST alerts to whatever URL the fuzzer invents (only admins set
# them, and test deliveries to arbitrary addresses are not something to fire from a test). The SSE stream
# never ends by design.
EXCLUDE = "receivers|stream"


def test_no_endpoint_answers_5xx_to_generated_input(db_url: str, tmp_path: Path) -> None:
    token = cli("token", "create", "--host", "fuzz-host", "--database-url", db_url).stdout.strip()
    server = ServerProcess(db_url).start()
    try:
        st = Path(sys.executable).with_name("st")
        proc = subprocess.run(
            [
                str(st),
                "run",
                server.base_url + "/openapi.json",
                "--checks",
                "not_a_server_error",
                "--exclude-path-regex",
                EXCLUDE,
                "--header",
                f"Authorization: Bearer {token}",
                "--max-examples",
                MAX_EXAMPLES,
                "--workers",
                "1",
                "--seed",
                "20261130",
                "--no-color",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.stop()
    out = proc.stdout + proc.stderr
    generated = re.search(r"(\d+) generated", out)
    print(f"schemathesis: {generated.group(0) if generated else 'no count'} against {db_url.split(':')[0]}")
    assert proc.returncode == 0, out[-6000:]
    assert generated and int(generated.group(1)) >= 500, out[-3000:]
