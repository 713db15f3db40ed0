"""Text exactly as the engines and their libraries print it: SGLang's prefix, tqdm bars, PyTorch's glog
lines, NCCL INFO lines, uvicorn access lines. Times are printed in UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def sglang_prefix(ts: float, tags: str | None, ms: bool = False) -> str:
    d = _dt(ts)
    stamp = d.strftime("%Y-%m-%d %H:%M:%S") + (f".{d.microsecond // 1000:03d}" if ms else "")
    return f"[{stamp} {tags}] " if tags else f"[{stamp}] "


def python_logging_stamp(ts: float) -> str:
    """Third-party libraries' default format, e.g. flashinfer: ``2025-03-03 18:46:45,039``."""
    d = _dt(ts)
    return d.strftime("%Y-%m-%d %H:%M:%S") + f",{d.microsecond // 1000:03d}"


def glog_prefix(ts: float, nccl_rank: int, level: str, source: str) -> str:
    """PyTorch c10 logging: ``[rank6]:[E1130 01:29:36.730311765 ProcessGroupNCCL.cpp:616] ``."""
    d = _dt(ts)
    nanos = d.microsecond * 1000 + int(nccl_rank * 7919 + ts * 1e9) % 1000
    return f"[rank{nccl_rank}]:[{level}{d:%m%d %H:%M:%S}.{nanos:09d} {source}] "


def pg_prefix(nccl_rank: int) -> str:
    return f"[PG ID 0 PG GUID 0(default_pg) Rank {nccl_rank}] "


def _interval(seconds: float) -> str:
    s = max(0, int(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def _rate(done: int, elapsed: float) -> str:
    if done == 0 or elapsed <= 0:
        return "?it/s"
    per = elapsed / done
    return f"{per:5.2f}s/it" if per >= 1 else f"{1 / per:5.2f}it/s"


def _eta(done: int, total: int, elapsed: float) -> str:
    return "?" if done == 0 else _interval(elapsed / done * (total - done))


def shard_bar(done: int, total: int, elapsed: float) -> str:
    """vLLM/SGLang's safetensors bar (custom bar_format)."""
    pct = 100.0 * done / total
    return (
        f"Loading safetensors checkpoint shards: {pct:3.0f}% Completed | {done}/{total} "
        f"[{_interval(elapsed)}<{_eta(done, total, elapsed)}, {_rate(done, elapsed)}]"
    )


_PARTIAL = " ▏▎▍▌▋▊▉"


def _bar(frac: float, width: int = 10) -> str:
    filled = frac * width
    full = int(filled)
    if full >= width:
        return "█" * width
    part = _PARTIAL[int((filled - full) * 8)]
    return ("█" * full + part).ljust(width)


def capture_bar(done: int, total: int, elapsed: float, bs: int, avail_gb: float) -> str:
    """tqdm's default format as SGLang's capture loop sets its description."""
    frac = done / total
    return (
        f"Capturing batches (bs={bs} avail_mem={avail_gb:.2f} GB): {100 * frac:3.0f}%|{_bar(frac)}| "
        f"{done}/{total} [{_interval(elapsed)}<{_eta(done, total, elapsed)}, {_rate(done, elapsed)}]"
    )


def capture_batch_sizes(count: int) -> list[int]:
    """Batch sizes in capture order (largest first), like SGLang's default cuda_graph_bs list."""
    sizes = [1, 2, 4, 8]
    while len(sizes) < count:
        sizes.append(sizes[-1] + 8 if sizes[-1] >= 16 else 16)
    return sorted(sizes[:count], reverse=True)


def nccl_info(host: str, pid: int, gpu: int, message: str) -> str:
    return f"{host}:{pid}:{pid} [{gpu}] NCCL INFO {message}"


def uvicorn_access(client: str, method: str, path: str, status: int = 200) -> str:
    phrase = {200: "OK", 400: "Bad Request", 503: "Service Unavailable"}.get(status, "OK")
    return f'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {phrase}'


def gb(x: float) -> str:
    return f"{x:.2f}"
