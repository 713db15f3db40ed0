"""A training job's own pace: how long a pause may last before it is a stall, learnt per launch.

A torch job's cadence is the gaps between its log lines (steps, losses: app/rankstate/torchjob.py keeps the
longest). A pause in which one rank does I/O (a checkpoint: torch.save or a save_checkpoint in its stack) while every other rank waits in a barrier or collective is checkpointing, not a deadlock,
until it lasts far longer than the launch's own pauses: ``checkpoint_factor`` times the longest gap the launch
has had, or ``checkpoint_first_s`` while it has had none longer than a step. A pause in which the odd rank is
on the CPU (a slower rank's step) is given the same multiple of the launch's cadence before its split counts.

Pure: launch state, stack groups and time in; no clock.
"""

from __future__ import annotations

from app.detect.config import DetectConfig
from app.rankstate import LaunchState
from app.rankstate.stacks import StackGroup
from app.rankstate.torchjob import is_torch_job, phase_of_frames

MIN_GAPS = 3  # gaps between job lines before the cadence is trusted


def longest_gap(st: LaunchState) -> float | None:
    return max(st.job_gaps) if len(st.job_gaps) >= MIN_GAPS else None


def checkpointing(groups: list[StackGroup], odd: list[str]) -> list[str]:
    """The odd ranks of a split that are writing a checkpoint while the rest wait: [] when any is not."""
    if not odd or not groups or not groups[0].waiting:
        return []
    where = {rank: g for g in groups for rank in g.ranks}
    for label in odd:
        g = where.get(label)
        # the frames, not the process state: a rank in the kernel's disk wait while its peers wait in a
        # collective is as often the deadlock's culprit (a stuck read) as a writer
        if g is None or phase_of_frames(g.frames, g.waiting) != "checkpoint":
            return []
    return odd


def pause_limit(st: LaunchState, cfg: DetectConfig, checkpoint: bool) -> float:
    """How long this launch may pause: a multiple of its longest gap so far; a checkpoint at least
    ``checkpoint_first_s`` until the launch has paused that long once (its first checkpoint teaches it)."""
    gap = longest_gap(st)
    if checkpoint:
        learnt = cfg.checkpoint_factor * gap if gap is not None else 0.0
        taught = gap is not None and gap * 2 >= cfg.checkpoint_min_s
        return max(learnt, cfg.checkpoint_min_s) if taught else max(learnt, cfg.checkpoint_first_s)
    return cfg.checkpoint_factor * gap if gap is not None else 0.0


def cpu_step_pending(
    st: LaunchState, odd: list[str], groups: list[StackGroup], quiet_s: float, cfg: DetectConfig
) -> bool:
    """A split whose odd ranks are on the CPU, in a job whose cadence is known and not yet exceeded: a rank
    still finishing its step, not a rank that will never join."""
    if not is_torch_job(st) or longest_gap(st) is None:
        return False
    active = {r for g in groups for r in g.active_ranks}
    return all(o in active for o in odd) and quiet_s <= pause_limit(st, cfg, checkpoint=False)
