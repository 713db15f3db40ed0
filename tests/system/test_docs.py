"""The docs a newcomer follows stay true: the configuration reference is generated from the code, links
resolve, and every `specwatch ...` command the docs show exists with the flags they use."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from app.settings import Settings
from tests.support.harness import ROOT, cli

DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
OPS_DOCS = ("getting-started.md", "cluster.md", "upgrading.md", "troubleshooting.md", "configuration.md")


def test_configuration_reference_is_generated_from_settings() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli.docgen", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr + " (run: python -m app.cli.docgen)"
    text = (ROOT / "docs" / "configuration.md").read_text()
    for name in Settings.model_fields:
        assert f"`SPECWATCH_{name.upper()}" in text
    assert "`SPECWATCH_DETECT__STALL_SERVING_S`" in text


def test_the_documented_toml_example_is_a_working_config(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    example = re.search(r"```toml\n(.*?)```", text, re.S)
    assert example is not None
    config = tmp_path / "server.toml"
    config.write_text(example.group(1))
    probe = (
        "from app.settings import Settings; s = Settings(); "
        "print(s.resolved_database_url(), s.public_url, s.detect.stall_serving_s)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={"SPECWATCH_CONFIG": str(config), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [
        "postgresql+psycopg://specwatch@db.internal/specwatch",
        "https://specwatch.internal",
        "30.0",
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


@cache
def _help(*command: str) -> str:
    return str(cli(*command, "--help").stdout)


def _commands(doc: Path) -> list[list[str]]:
    """`specwatch ...` invocations inside the doc's code blocks, continuation lines joined."""
    found = []
    for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", doc.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            match = re.search(r"(?:^|[\s;&|(/])specwatch ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)(.*)", line)
            if match and not line.startswith("#"):
                words = match.group(1).split()
                own = match.group(2).split(" -- ", 1)[0]  # after `--launch --` come the engine's flags
                found.append([*words, *re.findall(r"(?<!\S)(--[a-z][a-z-]*)", own)])
    return found


@pytest.mark.parametrize("name", OPS_DOCS)
def test_documented_commands_and_flags_exist(name: str) -> None:
    doc = ROOT / "docs" / name
    assert doc.exists(), f"docs/{name} is missing"
    for words in _commands(doc):
        command, flags = (
            [w for w in words if not w.startswith("--")],
            [w for w in words if w.startswith("--")],
        )
        path = [command[0]]
        choices = re.search(
            r"\{([a-z,-]+)\}", _help(path[0])
        )  # _help fails for a command that does not exist
        if len(command) > 1 and choices and command[1] in choices.group(1).split(","):
            path.append(command[1])
        usage = _help(*path)
        for flag in flags:
            assert flag in usage, f"docs/{name}: `specwatch {' '.join(path)}` has no {flag}"
