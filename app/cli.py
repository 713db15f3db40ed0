"""The ``specwatch`` command. Subcommands import their heavy dependencies lazily, so ``specwatch agent`` on a
GPU host never loads the server."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from app import __version__

# Modules that add subcommands: each has register(subparsers) which sets ``func`` on its parser.
COMMAND_MODULES: tuple[str, ...] = (
    "app.commands",
    "app.backup",
    "app.alerts.commands",
    "app.scenario_commands",
    "app.check_draft",
    "agents.logparse.command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specwatch",
        description="Watch speculative-decoding inference launches: per-rank progress, hangs, acceptance.",
    )
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
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
        print(f"specwatch: {exc}", file=sys.stderr)
        return exc.exit_code


class CommandError(Exception):
    """A user-facing failure: printed as one sentence, exit code 2 unless given."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


if __name__ == "__main__":
    sys.exit(main())
