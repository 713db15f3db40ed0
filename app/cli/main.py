"""The ``specwatch`` command. Subcommands import their heavy dependencies lazily, so ``specwatch agent`` on a
GPU host never loads the server."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from agents.cleantext import echo
from app import __version__
from app.kit.logsink import LOG_FORMAT

# Each command and the module that adds it (register(subparsers) sets ``func`` on its parser). A command loads
# its own module alone: ``specwatch agent`` on a GPU host must not pay tens of MB and a second of start-up for
# the server's imports, and every ``serve``, ``jobs`` or ``token`` process starts faster for not importing
# replay, eval and the draft checker. ``--help`` (or no command) loads them all. tests/system/test_agent_cli.py checks
# that this table names every command each module registers.
COMMANDS: dict[str, str] = {
    "serve": "app.cli.commands",
    "jobs": "app.cli.commands",
    "token": "app.cli.commands",
    "user": "app.cli.commands",
    "db": "app.cli.commands",
    "demo": "app.cli.commands",
    "backup": "app.cli.backup",
    "receiver": "app.alerts.commands",
    "silence": "app.alerts.commands",
    "scenarios": "app.cli.scenarios",
    "check-draft": "app.cli.check_draft",
    "parse-log": "agents.logparse.command",
    "agent": "agents.cli",
    "eval": "app.offline.evaluate",
    "replay": "app.offline.replay",
    "status": "app.cli.oncall",
    "incidents": "app.cli.oncall",
}
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))
SERVER_HINT = "the server's commands need its packages: pip install 'specwatch[server]'"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specwatch",
        description="Watch speculative-decoding inference launches: per-rank progress, hangs, acceptance.",
    )
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    only = COMMANDS.get(words[0]) if words else None
    missing = []
    for name in (only,) if only else COMMAND_MODULES:
        try:
            importlib.import_module(name).register(sub)
        except ModuleNotFoundError as exc:
            # a GPU host that installed the agent alone (`pip install specwatch`) lacks the server's packages:
            # their commands are left out and named, rather than every command failing
            if not exc.name or exc.name.partition(".")[0] in ("app", "agents"):
                raise
            missing.append(exc.name.partition(".")[0])
    if missing:
        parser.epilog = f"{SERVER_HINT} (missing: {', '.join(sorted(set(missing)))})"
    if words and words[0] not in sub.choices and missing:
        raise CommandError(f"`specwatch {words[0]}` is not available here: {parser.epilog}")
    return parser


def agent_main(argv: Sequence[str] | None = None) -> int:
    """``specwatch-agent ARGS`` = ``specwatch agent ARGS``: the command a GPU host's unit file runs, which loads
    the agent's modules and none of the server's (tests/system/test_release.py checks the import closure)."""
    return main(["agent", *(sys.argv[1:] if argv is None else argv)])


def check_own_agents() -> None:
    """``agents`` is a name other distributions install too (the openai-agents SDK does); pip lets the later one
    overwrite the earlier's files. Say so in one sentence rather than fail on some import later
    (docs/dependencies.md: why the top-level names stay, and the mitigation)."""
    import agents

    if getattr(agents, "__version__", None) != __version__:
        raise CommandError(
            f"the `agents` package at {getattr(agents, '__file__', '?')} is not specwatch's (another "
            "distribution installs one of that name): install specwatch in a virtual environment of its own"
        )


def main(argv: Sequence[str] | None = None) -> int:
    argv, launch = split_launch(list(sys.argv[1:] if argv is None else argv))
    try:
        check_own_agents()
        parser = build_parser(argv)
    except CommandError as exc:
        echo(f"specwatch: {exc}", file=sys.stderr)
        return exc.exit_code
    args = parser.parse_args(argv)
    if launch is not None:
        args.launch = launch
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format=LOG_FORMAT,
    )
    for noisy in ("alembic", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except CommandError as exc:
        echo(f"specwatch: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        # a command that imports the server's packages when it runs, on a host that installed the agent alone
        if not exc.name or exc.name.partition(".")[0] in ("app", "agents"):
            raise
        print(f"specwatch: `specwatch {args.command}` needs {exc.name}: {SERVER_HINT}", file=sys.stderr)
        return 2


def split_launch(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``specwatch agent ... --launch -- CMD ARGS``: everything after ``--launch`` is the engine's command line,
    kept from argparse (which would read the engine's own ``--flags`` as the agent's)."""
    if "--launch" not in argv:
        return argv, None
    i = argv.index("--launch")
    command = argv[i + 1 :]
    return argv[:i], command[1:] if command[:1] == ["--"] else command


class CommandError(Exception):
    """A user-facing failure: printed as one sentence, exit code 2 unless given."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


if __name__ == "__main__":
    sys.exit(main())
