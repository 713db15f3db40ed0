"""The ``specwatch`` command (main) and its subcommands; each module has register(subparsers)."""
