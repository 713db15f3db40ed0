"""The rank's phase vocabulary.

One home for the phase names: the reducer sets them, the detector reads them, and the dashboard's timeline takes
its legend from ``PHASES`` through the server (base.html), never a copy.
"""

from __future__ import annotations

# Order in which a healthy rank passes through its life. ``stalled`` is set by the detector, never by a log line.
PHASES = (
    "starting",
    "dist_init",
    "loading_weights",
    "kv_alloc",
    "cuda_graph_capture",
    "warmup",
    "ready",
    "serving",
    # a generic torch.distributed job (app/rankstate/torchjob.py): its steps, a synchronous checkpoint, the end
    "training",
    "checkpoint",
    "teardown",
    "stalled",
    "crashed",
    "exited",
)
STARTUP_PHASES = frozenset(
    {"starting", "dist_init", "loading_weights", "kv_alloc", "cuda_graph_capture", "warmup"}
)
LIVE_PHASES = STARTUP_PHASES | {"ready", "serving", "training", "checkpoint", "teardown"}
TERMINAL_PHASES = frozenset({"crashed", "exited"})

# Start-up lines every scheduler logs for itself, in order: how far a rank has got, comparable across ranks.
MILESTONES = frozenset(
    {
        "dist_init_begin",
        "dist_init_end",
        "load_begin",
        "load_end",
        "kv_alloc",
        "mem_pool_end",
        "capture_begin",
        "capture_end",
    }
)
