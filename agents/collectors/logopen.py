"""Opening a followed log file without being tricked into another one.

The agent often runs as root, and every line it reads is served to every dashboard viewer. Whoever may write
in a watched folder (or start a process that looks like an engine and names its own output file) could
otherwise swap a log for a link to ``/etc/shadow`` and read it through the dashboard. So a log is opened only
when what was opened is a regular file inside the folder the agent was told to watch:

- the last component is opened with ``O_NOFOLLOW``; a link is followed only when its target is inside the
  watched folder too (``current.log -> engine-0412.log``), and the target is then opened with ``O_NOFOLLOW``;
- what the descriptor really names (``/proc/self/fd/N``, so no race between a check and the open) must be
  inside the watched folder's real path: a linked sub-folder matched by a glob is refused;
- a file with several hard links that others may not read is refused: on a host with
  ``fs.protected_hardlinks=0`` anyone may link a root-only file into a folder they can write in.
"""

from __future__ import annotations

import errno
import glob
import os
import stat
from pathlib import Path

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC  # O_NONBLOCK: never block on a FIFO


class Refused(OSError):
    """A log path the agent will not read; the message says why, for the agent's own log."""


def watch_root(pattern: str) -> str:
    """The folder a pattern lets the agent read in: a directory itself, a file's folder, a glob's fixed
    leading folders (``/var/log/sglang/*.log`` -> ``/var/log/sglang``)."""
    p = Path(pattern)
    if glob.has_magic(pattern):
        parts: list[str] = []
        for part in p.parts:
            if glob.has_magic(part):
                break
            parts.append(part)
        return str(Path(*parts)) if parts else "/"
    return str(p) if p.is_dir() else str(p.parent)


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def _real_name(fd: int, fallback: str) -> str:
    try:
        return str(Path(f"/proc/self/fd/{fd}").readlink())
    except OSError:  # no /proc (not Linux): the path as resolved now
        return os.path.realpath(fallback)


def open_log(path: str, root: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor on ``path`` and its ``fstat``; ``Refused`` (or another OSError) if the file is
    not a regular file inside ``root``."""
    real_root = os.path.realpath(root)
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EMLINK):
            raise
        target = os.path.realpath(path)
        if not _inside(target, real_root):
            raise Refused(f"is a symbolic link to {target}, outside {real_root}: not read") from None
        fd = os.open(target, _FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("is not a regular file: not read")
        real = _real_name(fd, path)
        if not _inside(real, real_root):
            raise Refused(f"is {real}, outside {real_root} (a linked folder?): not read")
        if st.st_nlink > 1 and not st.st_mode & stat.S_IROTH:
            raise Refused(
                f"is a hard link ({st.st_nlink} names) to a file others may not read (owner uid {st.st_uid}): "
                "not read"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st
