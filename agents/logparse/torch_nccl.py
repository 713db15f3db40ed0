"""PyTorch ProcessGroupNCCL messages (after the glog prefix) and NCCL's own ``NCCL INFO/WARN`` lines."""

from __future__ import annotations

import re

from .values import Fields

Match = tuple[str, str, Fields]

# [PG ID 0 PG GUID 0(default_pg) Rank 6]  |  torch <= 2.3: [PG 0 Rank 6]  |  older still: [Rank 6]
_PG = re.compile(r"\[(?:PG (?:ID )?(\d+) (?:PG GUID (\S+?) )?)?Rank (\d+)\] ?")
_WORK = re.compile(
    r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)(?:, NumelIn=(-?\d+), NumelOut=(-?\d+))?"
    r"(?:, Timeout\(ms\)=(\d+))?\)(?: ran for (\d+) milliseconds)?"
)
_STUCK = re.compile(r"got stuck for (\d+) seconds")
# "last enqueued NCCL work: 12, last completed NCCL work: 11" (torch <= 2.5) and
# "PG status: last enqueued work: 12, last completed work: 11" (newer)
_ENQ = re.compile(r"[Ll]ast enqueued (?:NCCL )?work: (-?\d+), last completed (?:NCCL )?work: (-?\d+)")
_AT_WORK = re.compile(r"(?:at work|NCCL work|at work sequence id): (\d+)")
# "... from rank 3 and we will ...", "... from  rank 7 ..." (torch 2.6+: two spaces), "... from this local rank ..."
_FROM_RANK = re.compile(r"from\s{1,3}rank (\d+)")
# TORCH_DISTRIBUTED_DEBUG=DETAIL: "Detected mismatch between collectives on ranks. Rank 1 is running collective:
# CollectiveFingerPrint(SequenceNumber=3104, OpType=ALLREDUCE, ...), but Rank 0 is running collective: ..."
_FINGERPRINT = re.compile(
    r"Rank (\d{1,7}) is running (?:inconsistent )?collective: CollectiveFingerPrint\((?:SequenceNumber=(\d+), )?"
    r"OpType=(\w{1,64})"
)
# messages that name themselves as ProcessGroupNCCL's, when they come without its glog header
# (behind torchrun's "[rank3]: " prefix, or as a traceback's exception line)
TORCH_STARTS = (
    "[PG ",
    "[Rank ",
    "Watchdog caught",
    "Process group watchdog thread terminated",  # the watchdog's own message, pasted without its header
    "Received a dump signal",
    "Observed flight recorder",
    "Heartbeat monitor",
    "ProcessGroupNCCL",
    "failure detected by watchdog",
    "Detected mismatch",
    "RuntimeError: Detected mismatch",
)
_INIT_DONE = re.compile(r"comm 0x[0-9a-f]+ rank (\d+) nranks (\d+).*Init COMPLETE")


def pg_fields(msg: str, fields: Fields) -> None:
    m = _PG.search(msg, 0, 200)
    if m:
        if m.group(1):
            fields["pg_id"] = int(m.group(1))
        if m.group(2):
            guid, _, name = m.group(2).partition("(")
            fields["pg_guid"] = guid[:64]
            if name:
                fields["pg_name"] = name.rstrip(")")[:128]
        fields["pg_rank"] = int(m.group(3))


def torch_message(msg: str, level: str) -> Match:
    """Always classifies: an unknown PyTorch line is still a ``raw`` line at the glog level's severity."""
    fields: Fields = {}
    pg_fields(msg, fields)
    if "pg_rank" in fields:  # the rank the report names, where no header says whose line it is
        fields["global_rank"] = fields["pg_rank"]
    if "Watchdog caught collective operation timeout" in msg:
        _work(msg, fields)
        return "nccl_timeout", "error", fields
    if "watchdog thread terminated with exception:" in msg:
        # the watchdog killed by something other than a timeout (checked above): the device's own error (a CUDA
        # or HIP illegal access, sglang#3658, vllm#41622) ends the process, its peers left waiting
        fields["cause"] = "watchdog_error"
        return "child_crashed", "critical", fields
    if "Heartbeat monitor timed out" in msg:
        return "nccl_heartbeat", "critical", fields
    if "we are taking the entire process down" in msg:
        # the watchdog's verdict on a collective that failed or timed out, the one line of its report an
        # excerpt may keep (diffusers#12422): the rank is about to abort, its peers wait in that collective
        fields["cause"] = "watchdog_abort"
        return "collective_timeout", "error", fields
    if "got stuck for" in msg:
        m = _STUCK.search(msg)
        if m:
            fields["stuck_s"] = int(m.group(1))
        return "nccl_heartbeat", "critical", fields
    m = _ENQ.search(msg) if "ast enqueued" in msg else None
    if m:
        fields["enqueued"] = int(m.group(1))
        fields["completed"] = int(m.group(2))
    if (
        "dump signal" in msg
        or "timeout signal from" in msg  # torch <= 2.3
        or "to signal dumping" in msg
        or "preparing to dump debug info" in msg
    ):
        peer = _FROM_RANK.search(msg)
        if peer:
            fields["from_rank"] = int(peer.group(1))
        elif "from this local rank" in msg or "First PG on this rank" in msg:
            fields["from_self"] = True  # this rank's own watchdog saw the timeout first
        return "nccl_dump", "error", fields
    if "mismatch between collectives" in msg:
        return "collective_mismatch", "critical", mismatch_fields(msg, fields)
    if "[c10d]" in msg and (t := _C10D_TIMEOUT.search(msg)) is not None:
        # the store's socket gave up: a rendezvous or a key that never came (pytorch#79388's "The client socket
        # has timed out after 60s while trying to connect", sglang#3398's "waitForInput: socket ... timed out
        # after 1800000ms"): the ranks waited for a peer that never answered
        fields.update(backend="c10d_store", op="connect" if "connect" in msg else "wait")
        fields["timeout_ms"] = int(t[1]) * (1 if t[2] == "ms" else 1000)
        return "collective_timeout", "error", fields
    if "Terminating the process after attempting to dump debug info" in msg:
        return "nccl_dump", "critical", fields
    if m:
        at = _AT_WORK.search(msg)
        if at and "detected by watchdog" in msg:
            fields["failed_work"] = int(at.group(1))
        # the periodic report is routine; the same counters inside a failure report are the failure
        if "periodically" in msg:
            return "nccl_work_update", "warning" if m.group(1) != m.group(2) else "info", fields
        return "nccl_work_update", "error", fields
    if "WorkNCCL(" in msg:
        _work(msg, fields)
    return "raw", _GLOG_SEVERITY.get(level, "info"), fields


def _work(msg: str, fields: Fields) -> None:
    m = _WORK.search(msg)
    if not m:
        return
    fields["seq"] = int(m.group(1))
    fields["op_type"] = m.group(2)[:64]
    if m.group(3) is not None:
        fields["numel_in"] = int(m.group(3))
        fields["numel_out"] = int(m.group(4))
    if m.group(5) is not None:
        fields["timeout_ms"] = int(m.group(5))
    if m.group(6) is not None:
        fields["ran_ms"] = int(m.group(6))


_C10D_TIMEOUT = re.compile(r"timed out after (\d{1,9}) ?(ms|s)\b")
_GLOG_SEVERITY = {"I": "info", "W": "warning", "E": "error", "F": "critical"}


def glog_severity(level: str) -> str:
    return _GLOG_SEVERITY.get(level, "info")


# the error trace's frame at NCCL's API boundary, with a non-zero ncclResult_t (1 unhandled CUDA error, 2 system
# error, 3 internal error, 5 invalid usage, 6 remote error); traces inside a proxy or socket helper stop there
_API_RETURN = re.compile(r"\b(init|group)\.cc:\d{1,6} -> ([1-9]\d?)\b")


def nccl_message(level: str, msg: str, fields: Fields) -> Match:
    """NCCL's own debug output (``NCCL_DEBUG=INFO``): noise, except communicator completion and warnings."""
    if "Init COMPLETE" in msg:
        m = _INIT_DONE.search(msg)
        if m:
            fields["nccl_rank"] = int(m.group(1))
            fields["nranks"] = int(m.group(2))
        return "nccl_log", "info", fields
    if level == "INFO" and "-> " in msg and (m := _API_RETURN.search(msg)) is not None:
        # NCCL's error trace ("init.cc:1358 -> 3", "group.cc:406 -> 3") reaching its API entry points: the call
        # (the communicator's creation, a group's collectives) returned the error to the framework, which
        # raises it (DistBackendError): the process goes down (nccl#1235, an out-of-memory during init)
        fields.update({"engine": "nccl", "cause": f"nccl_result_{m.group(2)}", "nccl_call": m.group(1)})
        return "child_crashed", "critical", fields
    if level == "WARN":
        return "nccl_log", "warning", fields
    if level == "ERROR":
        return "nccl_log", "error", fields
    return "nccl_log", "debug", fields


def mismatch_fields(msg: str, fields: Fields) -> Fields:
    """The ranks (and their collectives) a mismatch report names: ``ranks`` "1,0", ``seqs``, ``op_types``."""
    found = _FINGERPRINT.findall(msg[:20000])[:16]
    if found:
        fields["ranks"] = ",".join(r for r, _, _ in found)
        fields["seqs"] = ",".join(q or "?" for _, q, _ in found)
        fields["op_types"] = ",".join(o for _, _, o in found)[:256]
        fields["rank_index"] = int(found[0][0])
    return fields


# NCCL's own failure, raised or logged: the collective library gave up (a socket, a device, a peer), and the rank
# that reports it cannot go on (pytorch#149984, ms-swift#1233, learnable-triangulation#81)
_NCCL_FAILED = re.compile(
    r"NCCL error in: |raised the following async exception: NCCL error|NCCL communicator was aborted|"
    r"nccl(?:System|UnhandledCuda|Internal|Remote|InvalidUsage)Error"
)
_NCCL_ERROR_NAME = re.compile(r"nccl(?:System|UnhandledCuda|Internal|Remote|InvalidUsage)Error")


def nccl_error(text: str) -> Match | None:
    """NCCL's report that it failed, in a line or an exception's message."""
    if "NCCL" not in text[:400] and "nccl" not in text[:400]:
        return None
    m = _NCCL_FAILED.search(text, 0, 600)
    if m is None:
        return None
    name = _NCCL_ERROR_NAME.search(text, 0, 800)
    return "child_crashed", "critical", {"engine": "nccl", "cause": name.group(0) if name else "nccl_error"}
