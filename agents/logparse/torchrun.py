"""torch.distributed's own lines: torchrun / elastic agent, c10d rendezvous and gloo errors, ``[rankN]:`` prefixes.

Shapes, from real torchrun 2.13 jobs on gloo (tests/system/test_torch_jobs.py runs them):

- torchrun's glog header, with no brackets and no year:
  ``W1201 09:56:54.628000 26378 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 26580 closing signal SIGTERM``
  ``E1201 09:56:54.661000 26378 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 2 (pid: 26581) of binary: /usr/bin/python``
- every line a worker writes to stderr through PyTorch's per-rank prefix: ``[rank1]: Traceback ...``,
  ``[rank1]: RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 60000ms for recv operation to complete``
- the peers of a rank that timed out first (and exited) see ``Connection closed by peer [127.0.0.1]:19171. This
  is typically caused by a remote worker crashing``: a consequence, never the culprit.
- ``Received Signals.SIGTERM death signal, shutting down workers``: the job was stopped; its ranks' exits follow.
- rendezvous that never completes: ``DistStoreError: Timed out after 61 seconds waiting for clients. 3/4
  clients joined.`` / ``wait timeout after 60000ms, keys: /default_pg/0//cuda//0``.

Pure: lines in, (kind, severity, fields) out. The header is the bare glog one (``heads.GLOG_BARE``); the parser dates it.
"""

from __future__ import annotations

import re
import signal

from .values import Fields

Match = tuple[str, str, Fields]

_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_CLOSING = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d+)ms for (\w+) operation")
_STORE_TIMEOUT = re.compile(
    r"(?:Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined"
    r"|wait timeout after (\d+)ms|Socket Timeout)"
)
_BARRIER_TIMEOUT = re.compile(
    r"Timed out initializing process group in store based barrier on rank:? ?(\d{1,7}).{0,200}?"
    r"world_size=(\d{1,7}), worker_count=(\d{1,7})"
)
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing")


_KEEP_ALIVE = re.compile(
    r"The node '([^']{1,200})' has failed to send a keep-alive heartbeat to the rendezvous '([^']{0,200})'"
    r"(?: due to an error of type (\w{1,64}))?"
)


# "Received Signals.SIGTERM death signal" / "Received SIGINT death signal" / "Received 1 death signal" (its number)
_DEATH_SIGNAL = re.compile(r"Received (?:Signals\.)?(SIG\w{2,8}|\d{1,2}) death signal")


def _signal_name(said: str) -> str:
    if not said.isdigit():
        return said
    try:
        return signal.Signals(int(said)).name
    except ValueError:
        return said


def launcher_message(msg: str) -> Match | None:
    """A line of torchrun's elastic agent, or None."""
    if "keep-alive heartbeat" in msg:
        # the agent cannot reach the rendezvous store (hosted by another node's agent): that node is gone,
        # and this node's workers wait on collectives with ranks that no longer exist (pytorch#76287: 8 h)
        m = _KEEP_ALIVE.search(msg)
        if m:
            fields: Fields = {"node": m.group(1)[:128], "rendezvous": m.group(2)[:128]}
            if m.group(3):
                fields["error"] = m.group(3)
            return "rendezvous_lost", "warning", fields
    if "closing signal" in msg:
        m = _CLOSING.search(msg)
        if m:
            return "closing_signal", "info", {"pid": int(m.group(1)), "signal": m.group(2)}
    if "death signal, shutting down workers" in msg:
        m = _DEATH_SIGNAL.search(msg)
        name = _signal_name(m.group(1)) if m else "?"
        if name == "SIGHUP":
            # the terminal or session that owned the launcher went away (an ssh that dropped, a job left without
            # nohup): nobody asked the job to stop, and its workers go down with it (LLaMA-Factory#9695, 7 h in)
            return "child_crashed", "critical", {"cause": "hangup", "signal": name, "launcher": "torchrun"}
        return "launcher_stopping", "warning", {"signal": name}
    if "failed (exitcode" in msg:
        m = _FAILED.search(msg)
        if m:
            code = int(m.group(1))
            return (
                "child_crashed",
                "error",
                {
                    "exit_code": code,
                    "local_rank": int(m.group(2)),
                    "pid": int(m.group(3)),
                    "launcher": "torchrun",
                },
            )
    return None


def collective_error(text: str) -> Match | None:
    """A worker's exception that says a collective or the rendezvous timed out, or that a peer went away."""
    m = _GLOO_TIMEOUT.search(text)
    if m:
        return (
            "collective_timeout",
            "error",
            {"backend": "gloo", "timeout_ms": int(m.group(1)), "op": m.group(2)},
        )
    if "DistStoreError" in text or "wait timeout after" in text or "Socket Timeout" in text:
        m2 = _STORE_TIMEOUT.search(text)
        if m2:
            fields: Fields = {"backend": "c10d_store"}
            if m2.group(2):
                fields["joined"], fields["world_size"] = int(m2.group(2)), int(m2.group(3))
            if m2.group(4):
                fields["timeout_ms"] = int(m2.group(4))
            return "collective_timeout", "error", fields
    if "RendezvousConnectionError" in text or "connection to the C10d store has failed" in text:
        # torchelastic's client gave up connecting to the rendezvous store (after its retries, 60 s by default:
        # pytorch#107021's socket timeout before it): the rendezvous never formed (pytorch#64926, #67581)
        return "collective_timeout", "error", {"backend": "c10d_store", "op": "connect"}
    if "store based barrier" in text and (b := _BARRIER_TIMEOUT.search(text)) is not None:
        # torch < 2.2's process-group barrier on the store: fewer workers than the world came (Megatron-DeepSpeed#338:
        # worker_count=4 of world_size=8 after 0:00:30)
        return (
            "collective_timeout",
            "error",
            {
                "backend": "c10d_store",
                "op": "barrier",
                "global_rank": int(b.group(1)),
                "joined": int(b.group(3)),
                "world_size": int(b.group(2)),
            },
        )
    if any(p in text for p in _PEER_LOST):
        return "peer_lost", "error", {"backend": "gloo"}
    return None
