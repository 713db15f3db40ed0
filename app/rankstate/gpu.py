"""GPU samples into rank state: memory rising, real compute versus a kernel spinning in a collective."""

from __future__ import annotations

from agents import wire
from app.rankstate.model import Fleet

# Thresholds of the reducer's own bookkeeping (what counts as "reading", "growing", "computing").
IO_RISE_BYTES = 16 * 1024 * 1024
MEM_RISE_BYTES = 256 * 1024 * 1024
# a GPU at least this busy at more than this share of its power limit is computing, not spinning in a collective
GPU_ACTIVE_PCT = 20.0
SPIN_POWER_RATIO = 0.25


def apply_gpu(fleet: Fleet, host: str, g: wire.GpuSample) -> None:
    h = fleet.host(host, g.ts)
    h.sample_ts = max(h.sample_ts or g.ts, g.ts)
    owner = fleet.by_gpu.get((host, g.uuid))
    if owner is None:
        for gp in g.processes:
            owner = fleet.by_pid.get((host, gp.pid))
            if owner is not None:
                break
    if owner is None:
        return
    st = fleet.launches.get(owner[0])
    r = st.ranks.get(owner[1]) if st else None
    if st is None or r is None:
        return
    if g.uuid not in r.gpu_uuids:
        r.gpu_uuids.append(g.uuid)
        fleet.index_rank(owner[0], r)
    if r.gpu_uuids[0] != g.uuid or (r.gpu_ts is not None and g.ts < r.gpu_ts):
        return
    if g.mem_used_bytes is not None:
        if r.mem_mark is None or g.mem_used_bytes < r.mem_mark:
            r.mem_mark = g.mem_used_bytes
        elif g.mem_used_bytes > r.mem_mark + MEM_RISE_BYTES:
            r.mem_rise_at, r.mem_mark = g.ts, g.mem_used_bytes
        r.mem_used_bytes = g.mem_used_bytes
    if g.util_gpu_pct is not None and g.util_gpu_pct >= GPU_ACTIVE_PCT:
        ratio = g.power_w / g.power_limit_w if g.power_w is not None and g.power_limit_w else None
        if ratio is None or ratio > SPIN_POWER_RATIO:
            r.gpu_active_at = g.ts
    r.gpu_ts = g.ts
    r.util_pct, r.power_w = g.util_gpu_pct, g.power_w
    if g.power_limit_w:
        r.power_limit_w = g.power_limit_w
    st.dirty.add(r.label)
