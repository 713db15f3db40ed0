"""NVML errors mid-run, through the real agent and the real NVML backend (agents/collectors/nvml.py) over the
simulated NVML library (agents/sim/nvmllib.py): GPU 4 falls off the bus with XID 79 (scenario xid-79) and,
earlier, ``nvmlDeviceGetPowerUsage`` starts failing on GPU 2. The server gets the events, the agent stays up
to its --duration and keeps sending the healthy GPUs' samples."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.support.agent import finish, start_agent
from tests.support.agentrun import rows, setup


def test_lost_gpu_and_a_failing_call_are_reported_and_the_others_keep_sampling(tmp_path: Path) -> None:
    url, server, token = setup(tmp_path)
    try:
        # at time scale 0.02 GPU 4 is lost ~8.4 s after the start; the power reading fails from 4 s
        agent = start_agent(
            token, "--server", server.base_url, "--spool", str(tmp_path / "spool"),
            "--simulate", "xid-79", "--time-scale", "0.02", "--sources", "gpu,procs", "--sim-sources", "gpu,procs",
            "--sim-nvml", "--sim-nvml-fail", "2:nvmlDeviceGetPowerUsage:4",
            "--interval", "0.25", "--batch-interval", "0.5", "--duration", "14",
        )  # fmt: skip
        out, taken = finish(agent)
    finally:
        server.stop()
    assert taken["pending"] == 0 and "GPUs: 8 via NVML (NVIDIA H200)" in out, out
    assert "GPU 4 (GPU-" in out and "is lost" in out and "GPU 2: power failed" in out

    events: dict[str, list[Any]] = defaultdict(list)
    for kind, ts, severity, fields in rows(
        url, "SELECT kind, ts, severity, fields FROM events WHERE source = 'nvml' ORDER BY ts"
    ):
        events[kind].append((ts, severity, json.loads(fields) if isinstance(fields, str) else fields))
    [(xid_ts, severity, xid)] = events["gpu_xid"]
    assert severity == "critical" and xid["xid"] == 79 and xid["gpu_index"] == 4 and xid["uuid"]
    errors = {e[2]["gpu_index"]: e for e in events["nvml_error"]}
    assert len(events["nvml_error"]) == 2 and set(errors) == {2, 4}, events["nvml_error"]
    assert errors[4][1] == "critical" and errors[4][2]["lost"] is True and errors[4][2]["uuid"] == xid["uuid"]
    assert errors[2][1] == "warning" and errors[2][2]["call"] == "power" and errors[2][2]["lost"] is False
    power_failed_ts = errors[2][0]

    samples = rows(
        url,
        'SELECT g."index", s.ts, s.power_w, s.util_gpu_pct FROM gpu_samples s JOIN gpus g ON g.id = s.gpu_id',
    )
    assert len(samples) == taken["gpus"]
    last = {i: max(s.ts for s in samples if s.index == i) for i in range(8)}
    assert last[4] < xid_ts + 1.0, "the lost GPU is not sampled any more"
    healthy = [i for i in range(8) if i != 4]
    assert all(last[i] > xid_ts + 3.0 for i in healthy), (
        f"healthy GPUs kept sampling: {last}, xid at {xid_ts}"
    )
    gpu2_after = [s for s in samples if s.index == 2 and s.ts > power_failed_ts]
    assert gpu2_after and all(s.power_w is None and s.util_gpu_pct is not None for s in gpu2_after)
    print(
        f"[nvml errors] {taken['gpus']} GPU samples stored; XID 79 on GPU 4, power failing on GPU 2; "
        f"healthy GPUs sampled {min(last[i] for i in healthy) - xid_ts:.1f} s past the XID"
    )
