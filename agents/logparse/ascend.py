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
  collective that never completed (HCCL_EXEC_TIMEOUT, 1800 s by default): a collective timeout.
- ROCm's ``HW Exception by GPU node-9 (Agent handle: ...) reason :GPU Hang``: the runtime aborts the process.
"""

from __future__ import annotations

import re

from .values import Fields

Match = tuple[str, str, Fields]

ERROR_SUMMARY = "[Error]: "
_D = r"(\d{4})-(\d\d)-(\d\d)"
_T = r"(\d\d):(\d\d):(\d\d)"
NPU_RECORD = re.compile(
    rf"\[(ERROR|WARNING|INFO|DEBUG|EVENT)\] {_D}-{_T} \(PID:\s?(\d{{1,10}}), Device:\s?(-?\d{{1,5}}), "
    r"RankID:\s?(-?\d{1,7})\) "
)
CANN_CODE = re.compile(
    rf"([A-Z][A-Z0-9]\d{{4}})(?:\[PID: ?(\d{{1,10}})\]|: \[PID: ?(\d{{1,10}})\]) {_D}-{_T}\.(\d{{3}})\.\d{{3}}"
    r"(?: \(\1\):)?\s{1,4}"
)
NPU_PYLOG = re.compile(
    rf"\[{_D} {_T}:(\d{{3}})\] ([A-Za-z_][\w.]{{0,100}}): \[(ERROR|WARNING|INFO|DEBUG)\] (?:\[\d{{1,10}}\] )?"
)
_FFTS_TIMEOUT = re.compile(r"hccl fftsplus task timeout occurred.{0,300}?timeout[:=](\d{1,7})", re.I)
_NOTIFY_WAIT = re.compile(r"EI0002.{0,400}?(?:remote rank\s?\[?(\d{1,7}))?.{0,400}?(\d{2,7})\s?s\b", re.I)
# "[Error]: The aicore execution times out.", "The aicpu execution is abnormal.", "The execution of the internal
# task times out." (CANN's one-line summary of the ACL error that follows it)
_DEVICE_FAULT = re.compile(
    r"The (?:(ai\w{2,8}) execution|execution of the (internal task)) (times out|is abnormal)"
)
_RESULT = re.compile(r"(?:runtime result|error code is) =? ?(5070\d\d)")


def npu_message(msg: str) -> Match | None:
    """An NPU or GPU runtime's own report that a device stopped: the rank is gone, or its collective is."""
    if "times out" in msg or "is abnormal" in msg:
        m = _DEVICE_FAULT.search(msg, 0, 400)
        if m and m.group(1):
            cause = f"{m.group(1)}_{'timeout' if m.group(3) == 'times out' else 'exception'}"
            return "child_crashed", "critical", {"engine": "npu", "cause": cause}
        if m and m.group(3) == "times out":
            # 507048: a device synchronize outlived HCCL_EXEC_TIMEOUT waiting for a collective (vllm-ascend#1443)
            return "collective_timeout", "error", {"backend": "hccl", "op": "internal task"}
    elif "fftsplus task timeout" in msg:
        m = _FFTS_TIMEOUT.search(msg)
        fields: Fields = {"backend": "hccl", "op": "fftsplus task"}
        if m:
            fields["timeout_s"] = int(m.group(1))
        return "collective_timeout", "error", fields
    elif msg.startswith("EI0002") or "The wait execution of the Notify register times out" in msg:
        fields = {"backend": "hccl", "op": "notify wait"}
        m = _NOTIFY_WAIT.search(msg)
        if m and m.group(1):
            fields["remote_rank"] = int(m.group(1))
        return "collective_timeout", "error", fields
    elif "reason :GPU Hang" in msg and msg.startswith("HW Exception by GPU"):
        return "child_crashed", "critical", {"engine": "rocm", "cause": "gpu_hang"}
    return None


def result_code(msg: str) -> int | None:
    """The ACL runtime's result code a CANN line quotes (507014 aicore timeout, 507018 aicpu exception)."""
    m = _RESULT.search(msg, 0, 2000)
    return int(m.group(1)) if m else None
