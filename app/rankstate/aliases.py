"""One worker, two names: a vLLM worker at TP > 1 logs its distributed init as ``(Worker pid=N)`` (global rank
only: ``rank1``) before it renames itself ``Worker_TP1``, and from then on its lines say ``TP1``. Both are the
same process, so the rank the early lines made moves over to the engine's own label, keeping its phases. The
key is the pid the line's wrapper names; nothing else is renamed. Pure."""

from __future__ import annotations

from agents import ranklabel, wire
from app.rankstate.model import LaunchState


def settle(st: LaunchState, host: str, ev: wire.Event, label: str | None) -> str | None:
    pid = ev.fields.get("pid")
    if label is None or not isinstance(pid, int) or isinstance(pid, bool):
        return label
    key = (host, pid)
    old = st.log_pids.get(key)
    if old is not None and old != label and ranklabel.is_torch(old) and not ranklabel.is_torch(label):
        r = st.ranks.get(old)
        if r is not None and label not in st.ranks:
            del st.ranks[old]
            r.label, r.aka = label, old
            st.ranks[label] = r
            st.dirty.discard(old)
            st.dirty.add(label)
    if len(st.log_pids) < 4096 or key in st.log_pids:
        st.log_pids[key] = label
    return label


def process_rank(st: LaunchState, host: str, pid: int) -> str | None:
    """The rank a worker process's own log lines named (an untagged ``VLLM::Worker`` whose title says none)."""
    return st.log_pids.get((host, pid))
