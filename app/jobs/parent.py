"""The jobs process's tie to its server, taken before anything else is imported.

``specwatch serve`` starts ``specwatch jobs`` as a child, and the child must end when its server does, however
the server went (a SIGKILL included): it must not go on holding the leader lease, or claiming webhooks, for a
server that no longer answers. The tie is made first thing, before the second of imports and the database
connection: a server killed during that second would otherwise leave the child to start the jobs anyway.
"""

from __future__ import annotations

import os
import signal
import sys

PARENT_ENV = "SPECWATCH_JOBS_PARENT"  # the pid whose death stops the jobs process


def parent_pid() -> int | None:
    value = os.environ.get(PARENT_ENV, "")
    return int(value) if value.isdigit() else None


def parent_gone() -> bool:
    """Re-parented: the server that started this process is dead."""
    parent = parent_pid()
    return parent is not None and os.getppid() != parent


def die_with_parent() -> bool:
    """Linux: the kernel sends SIGTERM the instant the parent dies (PR_SET_PDEATHSIG); until the jobs install
    their own handler, SIGTERM's default action ends the process at once. Returns False when the parent is
    already gone (it died before the request took effect). Other systems rely on the jobs' parent poll."""
    if parent_pid() is None:
        return True
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    return not parent_gone()
