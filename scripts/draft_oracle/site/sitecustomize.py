"""Installs the oracle's import stubs (ORACLE_STUBS, comma-separated) in every Python process of the oracle
run, including the subprocesses an engine starts itself (vLLM inspects model classes in a child process)."""

import os
import sys

if os.environ.get("ORACLE_STUBS"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import stubs

    stubs.install(os.environ["ORACLE_STUBS"].split(","))
