"""Per-launch, per-rank state folded from wire records: the pure reducer behind the server, replay and eval.

``model`` holds the state (plain dataclasses), ``phases`` its phase vocabulary; ``reduce`` folds events and process samples
into it, with a module per kind of record it reads more of: ``gpu`` (GPU samples), ``serving`` (serving reports and
engine metrics), ``procs`` and ``exits`` (the processes around ranks and how ranks leave), ``torchjob``, ``aliases``
and ``unnamed`` (ranks known by other names or none), ``stacks`` (dumps grouped across ranks), ``infer`` (a start
never seen). ``persist`` is what the server keeps of it between ticks. Names are imported from the module that
defines them (mypy --strict); this package exports the ones most readers need.
"""

from app.rankstate.accept_history import AcceptReport
from app.rankstate.gpu import apply_gpu
from app.rankstate.infer import phase_before_crash
from app.rankstate.model import (
    CLEAN_EXIT_CODES,
    Fleet,
    HostState,
    LaunchState,
    PhaseSpan,
    RankState,
    Signal,
    launch_status,
    mark_stalled,
    progress,
    set_phase,
)
from app.rankstate.persist import launch_from_json, launch_to_json
from app.rankstate.phases import (
    LIVE_PHASES,
    MILESTONES,
    PHASES,
    STARTUP_PHASES,
    TERMINAL_PHASES,
)
from app.rankstate.procs import note_gone
from app.rankstate.reduce import (
    apply_event,
    apply_process,
    rank_for_global,
)
from app.rankstate.serving import DETECTOR_METRICS, apply_metric

__all__ = [
    "CLEAN_EXIT_CODES",
    "DETECTOR_METRICS",
    "LIVE_PHASES",
    "MILESTONES",
    "PHASES",
    "STARTUP_PHASES",
    "TERMINAL_PHASES",
    "AcceptReport",
    "Fleet",
    "HostState",
    "LaunchState",
    "PhaseSpan",
    "RankState",
    "Signal",
    "apply_event",
    "apply_gpu",
    "apply_metric",
    "apply_process",
    "launch_from_json",
    "launch_status",
    "launch_to_json",
    "mark_stalled",
    "note_gone",
    "phase_before_crash",
    "progress",
    "rank_for_global",
    "set_phase",
]
