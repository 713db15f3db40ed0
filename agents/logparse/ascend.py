"""Ascend NPU lines (torch_npu, CANN, HCCL) and other accelerators' device faults.

Headers (each carries its own full date; CANN writes ``YYYY-MM-DD-HH:MM:SS``):
- torch_npu's error records: ``[ERROR] 2025-12-12-12:10:10 (PID:402, Device:7, RankID:-1) ERR02005 DIST ...``
- CANN's error-code lines: ``EH9999[PID: 285] 2025-12-12-12:10:10.639.672 (EH9999):  ...`` and the older
  ``EH9999: [PID: 56178] 2025-07-30-06:16:22.730.302 wait for compute device ...``
- torch_npu's Python-side logger: ``[285] [2025-12-12 12:10:10:644] torch.distributed: [ERROR] [479] ...``
  (the launcher's pid in front, milliseconds after a colon)

Messages (the faults that end or stop a rank; vllm-ascend#4972, #2105, sglang#30453, lmdeploy#3354):
- ``The aicore execution times out`` / ``The aicpu execution is abnormal``: a kernel hung or failed on the
  device; torch_npu takes the process down after it (a crash of that rank).
- ``The execution of the internal task times out`` (507048, a device synchronize that waited past
  HCCL_EXEC_TIMEOUT for a collective), ``hccl fftsplus task timeout occurred ... timeout:1836`` and ``EI0002`` notify-wait timeouts: an HCCL
  collective that never completed (HCCL_EXEC_TIMEOUT, 1800 s by default): a collective timeout; so is
  ``Stream synchronize timeout`` (507046), a stream whose queued work never finished.
- ROCm's ``HW Exception by GPU node-9 (Agent handle: ...) reason :GPU Hang``: the runtime aborts the process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .envelope import TERMINATE
from .values import Fields

Match = tuple[str, str, Fields]

ERROR_SUMMARY = "[Error]: "
_DATE = r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)"
_TIME = r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
_CANN_TS = rf"{_DATE}-{_TIME}\.(?P<ms>\d{{3}})\.\d{{3}}"
_LEVEL = r"(?P<level>ERROR|WARNING|INFO|DEBUG|EVENT)"
# One envelope, several spellings: each names the same fields (date and time, level, pid, device, rank, error
# code, source location), and ``npu_head`` reads any of them into one ``NpuHead``.
_HEADS = (
    # torch_npu's error record: "[ERROR] 2025-12-12-12:10:10 (PID:402, Device:7, RankID:-1) ERR02005 ..."
    re.compile(
        rf"\[{_LEVEL}\] {_DATE}-{_TIME} \(PID:\s?(?P<pid>\d{{1,10}}), Device:\s?(?P<device>-?\d{{1,5}}), "
        r"RankID:\s?(?P<rank>-?\d{1,7})\) "
    ),
    # HCCL's plog line: "[ERROR] HCCL(2717288,python3):2025-07-23-03:47:57.070.463 [hccl_socket.cc:100] [2717288]"
    re.compile(
        rf"\[{_LEVEL}\] (?P<module>[A-Z][A-Z_]{{1,15}})\((?P<pid>\d{{1,10}}),(?P<proc>[\w.-]{{0,64}})\):{_CANN_TS} "
        r"\[(?P<src>[\w.-]{1,128}:\d{1,7})\] ?(?:\[\d{1,10}\])?"
    ),
    # CANN's error codes: "EH9999[PID: 285] 2025-...-12:10:10.639.672 (EH9999):  ...", "EH9999: [PID: 56178] ..."
    re.compile(
        rf"(?P<code>[A-Z][A-Z0-9]\d{{4}})(?:\[PID: ?(?P<pid>\d{{1,10}})\]|: \[PID: ?(?P<pid2>\d{{1,10}})\]) "
        rf"{_CANN_TS}(?: \((?P=code)\):)?\s{{1,4}}"
    ),
    # and with the code after the time: "[PID: 749] 2025-12-29-03:16:15.787.356 Get_Socket_Timeout(EI0006): ..."
    re.compile(
        rf"\[PID: ?(?P<pid>\d{{1,10}})\] {_CANN_TS} (?:(?P<name>\w{{1,64}})\((?P<code>[A-Z][A-Z0-9]\d{{4}})\): )?"
    ),
    # torch_npu's Python logger: "[2025-12-12 12:10:10:644] torch.distributed: [ERROR] [479] ..."
    re.compile(
        rf"\[{_DATE} {_TIME}:(?P<ms>\d{{3}})\] (?P<logger>[A-Za-z_][\w.]{{0,100}}): "
        r"\[(?P<level>ERROR|WARNING|INFO|DEBUG)\] (?:\[\d{1,10}\] )?"
    ),
)


@dataclass(slots=True)
class NpuHead:
    ymdhms: tuple[int, int, int, int, int, int]
    frac: float
    level: str | None
    rank: int | None  # RankID, where the record names one (-1: none)
    fields: Fields
    end: int


def npu_head(s: str) -> NpuHead | None:
    """The envelope of an Ascend line (torch_npu, CANN, HCCL), in any of its spellings, or None."""
    c = s[:1]
    if not (c == "[" or (c.isupper() and s[1:2].isalnum())):
        return None
    for rx in _HEADS:
        m = rx.match(s)
        if m is None:
            continue
        g = m.groupdict()
        fields: Fields = {}
        for key in ("pid", "pid2", "device"):
            if g.get(key):
                fields["pid" if key == "pid2" else key] = int(g[key])
        for key, name in (
            ("code", "code"),
            ("logger", "logger"),
            ("module", "module"),
            ("src", "source_file"),
        ):
            if g.get(key):
                fields[name] = g[key]
        rank = int(g["rank"]) if g.get("rank") and int(g["rank"]) >= 0 else None
        ymdhms = tuple(int(g[k]) for k in ("y", "mo", "d", "h", "mi", "s"))
        return NpuHead(
            ymdhms,  # type: ignore[arg-type]
            int(g["ms"]) / 1000 if g.get("ms") else 0.0,
            g.get("level"),
            rank,
            fields,
            m.end(),
        )
    return None


_THROWN = re.compile(r"instance of '([\w:<>, ]{1,120})'")
# the device's own report that a task it ran outlived its timeout, whatever the task: "hccl fftsplus task timeout
# occurred during task execution ... timeout=1836s" (a collective), "event wait timeout occurred during task
# execution ... timeout=1866s" (a stream waiting on another's event, vllm-ascend#2182)
_TASK_TIMEOUT = re.compile(
    r"(\w[\w ]{0,40}?) timeout occurred during task execution(?:.{0,300}?timeout[:=](\d{1,7}))?", re.I
)
_NOTIFY_WAIT = re.compile(r"EI0002.{0,400}?(?:remote rank\s?\[?(\d{1,7}))?.{0,400}?(\d{2,7})\s?s\b", re.I)
# "[Error]: The aicore execution times out.", "The aicpu execution is abnormal.", "The execution of the internal
# task times out." (CANN's one-line summary of the ACL error that follows it)
_DEVICE_FAULT = re.compile(
    r"The (?:([a-z][\w ]{1,20}?) execution|execution of the (internal task)) (times out|is abnormal)"
)
# HCCL's connection set-up: EI0006 "Getting socket times out", the plog's "wait socket establish timeout, role[1]
# rank[12] timeout[120]" (vllm-ascend#486, #1955, #5461, #9447): a peer that never connected
# and the link set-up that failed after it: "[InitChannelStage][RunFailed]Transport init error! createLink
# para:rank[7]-...remoteRank[15]" under HCCL's "CONNECT TIMEOUT DETECT RESULT" banner (vllm-ascend#10591)
_SOCKET_TIMEOUT = re.compile(
    r"(?:Getting socket times out|wait socket establish timeout|Transport init error|CONNECT TIMEOUT DETECT)"
    r"(?:.{0,80}?timeout\[(\d+)\])?"
)
_CONNECT_WORDS = ("socket", "Transport init", "CONNECT TIMEOUT")
# a CUDA kernel's device-side assertion (trtllm#10417): the context is lost, the process goes down with it
_DEVICE_ASSERT = re.compile(
    r"\.cu:\d{1,6}: \w{1,128}: block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion"
)
# an exception whose message is the accelerator runtime's or the collective library's own failure: the rank
# that raised it cannot go on (torch_npu's "NPU function error: ..., error code is 507035", "HCCL function
# error: HcclCommInitRootInfo(...)", "OPS function error: HcclAllreduce, error code is 6"; CUDA's and HIP's
# "CUDA error: an illegal memory access was encountered")
_FATAL_IN_EXCEPTION = ("NPU function error", "HCCL function error", "OPS function error: Hccl", "CUDA error: ",
                       "HIP error: ", "NPU error, error code is", "NPU out of memory", "CUDA out of memory",
                       " out of memory. ")  # fmt: skip  # an engine's own allocator giving up: SGLang's "Decode out of memory. Try ..."
_RESULT = re.compile(r"(?:runtime result|error code is) =? ?(\d{1,7})")


def npu_message(msg: str) -> Match | None:
    """An NPU or GPU runtime's own report that a device stopped: the rank is gone, or its collective is."""
    head = msg[:600]
    if "timeout occurred during task execution" in head and (m := _TASK_TIMEOUT.search(head)):
        task = m.group(1).strip().lower()
        fields: Fields = {"timeout_s": int(m.group(2))} if m.group(2) else {}
        if task.startswith("hccl "):  # HCCL's own task: a collective that never completed
            return "collective_timeout", "error", {"backend": "hccl", "op": task[5:], **fields}
        # any other device task (an event wait): the device's own timeout of a stall, no collective named
        return "engine_timeout", "critical", {"engine": "npu", "call": task, **fields}
    if "EI0002" in head[:16] or "Notify register times out" in head:
        fields = {"backend": "hccl", "op": "notify wait"}
        m = _NOTIFY_WAIT.search(head)
        if m and m.group(1):
            fields["remote_rank"] = int(m.group(1))
        return "collective_timeout", "error", fields
    if any(w in head for w in _CONNECT_WORDS) and (s := _SOCKET_TIMEOUT.search(head)):
        fields = {"backend": "hccl", "op": "connect"}
        if s.group(1):
            fields["timeout_s"] = int(s.group(1))
        return "collective_timeout", "error", fields
    if ("times out" in head or "is abnormal" in head) and (m := _DEVICE_FAULT.search(head)):
        if m.group(1):
            cause = (
                f"{m.group(1).replace(' ', '_')}_{'timeout' if m.group(3) == 'times out' else 'exception'}"
            )
            return "child_crashed", "critical", {"engine": "npu", "cause": cause}
        if m.group(3) == "times out":
            # 507048: a device synchronize outlived HCCL_EXEC_TIMEOUT waiting for a collective (vllm-ascend#1443)
            return "collective_timeout", "error", {"backend": "hccl", "op": "internal task"}
    if "Stream synchronize timeout" in head or "all tasks in the specified stream are not completed" in head:
        # 507046: a stream synchronize waited past its timeout for the work queued on the device (a collective
        # among it, on a multi-card job; Ascend/pytorch#48): nothing on that stream finished
        return "collective_timeout", "error", {"backend": "hccl", "op": "stream sync"}
    if "core exception]" in head or "there is an exception of ai" in head:
        # a kernel that faulted on the device (CANN's EZ9999 "there is an exception of aivec error ... Kernel task
        # happen error, retCode=0x31, [vector core exception]", sglang#12464): the context is lost with it
        return "child_crashed", "critical", {"engine": "npu", "cause": "kernel_exception"}
    if "HcclCommInitRootInfo fail" in head:
        # the communicator could not be created (MindIE via gpustack#2021): the rank cannot start
        return "child_crashed", "critical", {"engine": "hccl", "cause": "comm_init_failed"}
    if " Assertion" in head and _DEVICE_ASSERT.search(head):
        return "child_crashed", "critical", {"engine": "cuda", "cause": "device_assert"}
    if msg.startswith(TERMINATE):
        # C++'s std::terminate on an exception nobody caught: the runtime aborts the process (SIGABRT), whatever
        # the exception (TensorRT-LLM's TllmException, trtllm#1826, #2393; NCCL's std::runtime_error); its
        # what() line, read on its own, says why
        m = _THROWN.search(head)
        return "child_crashed", "critical", {"cause": "terminate", "exception": m.group(1) if m else ""}
    if msg.startswith("HW Exception by GPU") and "reason :GPU Hang" in head:
        return "child_crashed", "critical", {"engine": "rocm", "cause": "gpu_hang"}
    return None


def fatal_exception(said: str) -> Match | None:
    """An exception's message that is the device runtime's or HCCL's own failure: the rank is going down."""
    if not any(w in said[:600] for w in _FATAL_IN_EXCEPTION):
        return None
    fields: Fields = {"cause": "runtime_error"}
    code = result_code(said)
    if code is not None:
        fields["result"] = code
    return "child_crashed", "critical", fields


_EXCEPTION_LINE = re.compile(r"(?<![\w.])[A-Za-z_][\w.]{0,120}(?:Error|Exception): ")


def fatal_exception_line(msg: str) -> Match | None:
    """An exception line logged on its own, its traceback's start not in the log (a k9s view, an excerpt), whose
    message is the runtime's own failure (vllm#6976: 'RuntimeError: CUDA error: an illegal memory access')."""
    # the exception's name near the start: a reporter's own tag may come first ('[BUG] RuntimeError: ...', in the reporter's brackets)
    m = _EXCEPTION_LINE.search(msg, 0, 160) if "Error: " in msg[:160] or "Exception: " in msg[:160] else None
    return fatal_exception(msg[m.end() :]) if m and m.start() <= 16 else None


def result_code(msg: str) -> int | None:
    """The ACL runtime's result code a CANN line quotes (507014 aicore timeout, 507018 aicpu exception)."""
    m = _RESULT.search(msg, 0, 2000)
    return int(m.group(1)) if m else None
