"""A generic torch.distributed job (torchrun, gloo or NCCL, any training script) seen without its help: the
phases it passes through and its signs of life, from what the agent sees (process state, py-spy frames, the
launcher's output).

Phases: ``dist_init`` (the rendezvous and init_process_group; with NCCL the communicator is built in the first
collective, so a rank is in dist_init until it is seen past one), ``training`` (steps: compute between
collectives), ``checkpoint`` (torch.save and the writes under it), ``teardown`` (destroy_process_group). Where
a rank is comes from the innermost meaningful frames of its stack dump (app/rankstate/stacks.py's place). A
line the job prints without a rank tag (``step 120 loss 2.1`` on torchrun's stdout) is a sign of life of the
whole job: in SPMD training a rank that prints has passed its last collective, which every peer had to join.

Pure: rank state and records in, rank state changed; no clock.
"""

from __future__ import annotations

import re

from agents import ranklabel, wire
from app.rankstate.model import LaunchState, RankState, progress, set_phase
from app.rankstate.phases import TERMINAL_PHASES
from app.rankstate.reached import phase_shown

# frame words (function or file) -> phase, checked in order on the innermost few frames
_FRAME_PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("teardown", ("destroy_process_group",)),
    ("checkpoint", ("serialization.py", "torch.save", "_save", "save_state_dict", "checkpoint")),
    (
        "dist_init",
        ("init_process_group", "rendezvous", "_store_based_barrier", "_create_c10d_store", "TCPStore"),
    ),
)
_COLLECTIVES = ("all_reduce", "barrier", "broadcast", "all_gather", "reduce_scatter", "all_to_all", "reduce")
# lines torchrun's own elastic agent prints (glog headers naming torch/distributed/): not the job's progress
_LAUNCHER_LINE = re.compile(r"torch/distributed/|torchelastic|\[default\d*\]:?\s*$")
JOB_GAPS = 64  # gaps between a job's lines kept: a few checkpoints' worth of steps
TORCH_PHASES = frozenset({"training", "checkpoint", "teardown"})


def is_torch_job(st: LaunchState) -> bool:
    """Every rank a plain torch.distributed worker (``rank3``): no engine milestones, a job's own cadence."""
    return bool(st.ranks) and all(ranklabel.is_torch(lab) for lab in st.ranks)


def phase_of_frames(frames: list[str], waiting: bool) -> str | None:
    """The phase a torch rank's stack says it is in: its innermost frames first."""
    text = " ".join(frames[:6])
    for phase, words in _FRAME_PHASES:
        if any(w in text for w in words):
            return phase
    if waiting or any(f.startswith(c + " ") for f in frames[:3] for c in _COLLECTIVES):
        return "training"  # past init, in a collective (or the first one)
    return None


def stack_phase(r: RankState, frames: list[str], waiting: bool, importing: bool, ts: float) -> None:
    """A torch rank's stack dump places it: set its phase. A rank outside torch.distributed and not importing,
    once it was seen past dist_init, is computing a step (training); before that it is where it was."""
    if r.phase in TERMINAL_PHASES or importing:
        return
    phase = phase_of_frames(frames, waiting)
    cur = r.stalled_from if r.phase == "stalled" and r.stalled_from else r.phase
    if phase is None:
        phase = "training" if cur in TORCH_PHASES else None
    if phase is None or phase == cur:
        return
    if r.phase == "stalled":
        r.stalled_from = phase  # a stalled rank stays marked until it moves: its phase underneath changes
        return
    set_phase(r, phase, ts)


def place_from_stack(st: LaunchState, r: RankState, ev: wire.Event) -> None:
    """A torch rank's stack dump (a ``stacks`` event) says which phase it is in."""
    from app.rankstate.stacks import place  # the one reading of a dump's frames (pure, as this module is)

    where = place(ev.message, dict(ev.fields))
    if where is not None:
        before = r.phase
        stack_phase(r, where.frames, where.waiting, where.importing, ev.ts)
        if r.phase != before:
            st.dirty.add(r.label)


def job_line(st: LaunchState, ev: wire.Event) -> bool:
    """An untagged info line of a torch job (its own output, not torchrun's): progress of every live rank."""
    if (
        ev.kind != wire.EventKind.RAW
        or ev.severity not in ("info", "debug")
        or not ev.message.strip()
        or _LAUNCHER_LINE.search(ev.message)
        or not is_torch_job(st)
    ):
        return False
    # a gap that an open hang (a rank marked stalled) made is not the job's own pace
    stalled = any(r.phase == "stalled" for r in st.ranks.values())
    if st.job_line_at is not None and ev.ts > st.job_line_at and not stalled:
        st.job_gaps.append(ev.ts - st.job_line_at)
        del st.job_gaps[:-JOB_GAPS]
    st.job_line_at = max(st.job_line_at or ev.ts, ev.ts)
    # a line of the job's training steps (a step and its loss) is every rank's: SPMD ranks run the same step,
    # past init_process_group and the collectives before it; a rank whose place no stack has shown yet is there
    stepping = phase_shown(ev) == "training"
    for r in st.ranks.values():
        if r.phase not in TERMINAL_PHASES and ev.ts >= r.first_seen:
            progress(r, ev.ts, f"job log line: {ev.message.strip()[:120]}")
            if stepping and r.phase in ("starting", "dist_init") and ev.ts >= r.phase_since:
                set_phase(r, "training", ev.ts)
            st.dirty.add(r.label)
    return True
