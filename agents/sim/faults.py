"""Turning a scenario's faults into each rank's fate: when it stops making progress, what it looks like
afterwards, what it prints, and when (and how) it exits."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents import wire
from agents.sim.failures import dump_signal, heartbeat_timeout, watchdog_timeout
from agents.sim.noise import unit
from agents.sim.scenario import Scenario
from agents.sim.spec import FaultSpec
from agents.sim.timeline import INF
from agents.sim.topology import RankInfo

SERVING_SEQ_PERIOD_S = 7.5  # the scheduler's occasional torch collectives while serving (not the model's)


@dataclass(slots=True)
class Fate:
    stop: float = INF  # no progress from here on
    after: str = "blocked"  # the activity (signature) once stopped
    exit: float = INF
    exit_code: int | None = None
    error: str | None = None  # traceback printed just before exit
    glog: list[tuple[float, str]] = field(default_factory=list)  # PyTorch lines, no SGLang prefix
    watchdog: tuple[float, float] | None = None  # (when, timeout_s): SGLang's scheduler watchdog fires

    def stop_at(self, t: float, after: str) -> None:
        if t < self.stop:
            self.stop, self.after = t, after

    def exit_at(self, t: float, code: int, error: str | None = None) -> None:
        if t < self.exit:
            self.exit, self.exit_code, self.error = t, code, error
        self.stop_at(t, self.after)


@dataclass(slots=True)
class Fates:
    ranks: list[Fate]
    lost_gpus: dict[tuple[str, int], float] = field(default_factory=dict)
    hw_events: list[tuple[str, wire.Event]] = field(default_factory=list)
    cascades: bool = True

    @property
    def first_exit(self) -> tuple[int, Fate] | None:
        dead = [(f.exit, i) for i, f in enumerate(self.ranks) if f.exit < INF]
        if not dead:
            return None
        _, i = min(dead)
        return i, self.ranks[i]

    @property
    def launch_stop(self) -> float:
        return min(f.stop for f in self.ranks) if self.ranks else INF


def seq_at(sc: Scenario, t_rel: float) -> int:
    """How many torch collectives every rank has completed by ``t_rel``: one barrier per start-up step,
    then an occasional one while serving."""
    steps = sum(1 for s in sc.schedule.steps if s.start <= t_rel)
    seq = 1 + steps
    if t_rel >= sc.schedule.ready_at:
        seq += int((t_rel - sc.schedule.ready_at) / SERVING_SEQ_PERIOD_S)
    return seq


def resolve(
    sc: Scenario, ranks: list[RankInfo], uuids: dict[tuple[str, int], str], t0: float, seed: int
) -> Fates:
    fates = Fates([Fate() for _ in ranks])
    by_label = {r.label: r for r in ranks}
    order = sorted(sc.spec.faults, key=sc.schedule.fault_time)
    for fault in order:
        tf = t0 + sc.schedule.fault_time(fault)
        culprit = by_label.get(fault.rank) if fault.rank else None
        fates.cascades = fates.cascades and fault.cascade
        if fault.kind == "hang":
            _hang(sc, fault, fates, ranks, culprit, tf, t0, seed)
        elif fault.kind == "crash":
            assert culprit is not None
            code = fault.exit_code
            error = None if code == -9 or fault.error == "killed" else fault.error
            fates.ranks[culprit.index].exit_at(tf, code, error)
            _peers_spin_then_die(fault, fates, ranks, culprit, tf, seed)
        else:  # xid
            assert culprit is not None
            key = (culprit.host, culprit.gpu_index)
            uuid = uuids[key]
            fates.lost_gpus[key] = min(tf, fates.lost_gpus.get(key, INF))
            fates.hw_events.append(
                (
                    culprit.host,
                    wire.Event(
                        ts=tf,
                        kind=wire.EventKind.GPU_XID,
                        severity="critical",
                        source="nvml",
                        message=f"Xid {fault.xid}: GPU has fallen off the bus (GPU {culprit.gpu_index}, {uuid})",
                        fields={"xid": fault.xid, "gpu_index": culprit.gpu_index, "uuid": uuid},
                    ),
                )
            )
            fates.hw_events.append(
                (
                    culprit.host,
                    wire.Event(
                        ts=tf + 1.0,
                        kind=wire.EventKind.NVML_ERROR,
                        severity="error",
                        source="nvml",
                        message=f"nvmlDeviceGetUtilizationRates failed for GPU {culprit.gpu_index}: GPU is lost",
                        fields={
                            "call": "nvmlDeviceGetUtilizationRates",
                            "error": "GPU is lost",
                            "uuid": uuid,
                        },
                    ),
                )
            )
            fate = fates.ranks[culprit.index]
            fate.stop_at(tf, "lost")
            crash_t = tf + fault.crash_after_s * sc.time_scale
            fate.exit_at(crash_t, fault.exit_code, "launch_failure")
            for r in ranks:
                if r is not culprit:
                    fates.ranks[r.index].stop_at(tf, "spin")
            _peers_spin_then_die(fault, fates, ranks, culprit, crash_t, seed)
    return fates


def _peers_spin_then_die(
    fault: FaultSpec, fates: Fates, ranks: list[RankInfo], culprit: RankInfo, t: float, seed: int
) -> None:
    for r in ranks:
        if r is culprit:
            continue
        fate = fates.ranks[r.index]
        fate.stop_at(t, "spin")  # peers wait in their next collective for a rank that will never come
        if fault.cascade:
            fate.exit_at(t + 1.0 + 0.2 * unit(seed, "kill", r.index), -9)


def _hang(
    sc: Scenario,
    fault: FaultSpec,
    fates: Fates,
    ranks: list[RankInfo],
    culprit: RankInfo | None,
    tf: float,
    t0: float,
    seed: int,
) -> None:
    wait_rel = sc.schedule.wait_start(fault)
    for r in ranks:
        fate = fates.ranks[r.index]
        if culprit is None:
            fate.stop_at(tf, fault.peer_signature)
        elif r is culprit:
            fate.stop_at(tf, fault.culprit_signature)
        else:
            fate.stop_at(t0 + wait_rel, fault.peer_signature)
    if fault.sglang_watchdog_s and tf >= t0 + sc.schedule.ready_at:
        fired = tf + fault.sglang_watchdog_s * sc.time_scale
        for r in ranks:
            ts = fired + 0.2 * unit(seed, "sgl-wd", r.index)
            fate = fates.ranks[r.index]
            if ts < fate.exit:
                fate.watchdog = (ts, fault.sglang_watchdog_s)
                fate.exit_at(ts + 0.8, -9)  # the launcher's SIGQUIT handler kills the whole tree
    if not fault.collective_timeout_s:
        return
    seq = seq_at(sc, wait_rel)
    t1 = t0 + sc.schedule.timeout_time(fault) + 0.081
    peers = [r for r in ranks if r is not culprit]
    for r in peers:
        ts = t1 + 0.05 * unit(seed, "wd", r.index)
        fates.ranks[r.index].glog += [
            (ts, text) for text in watchdog_timeout(ts, r.nccl_rank, seq + 1, fault.collective_timeout_s)
        ]
    if culprit is not None and peers:
        ts = t1 + 0.3
        fates.ranks[culprit.index].glog += [
            (ts, x) for x in dump_signal(ts, culprit.nccl_rank, peers[0].nccl_rank, seq)
        ]
    last = t1 + 0.5
    if fault.heartbeat_timeout_s:
        t2 = t1 + fault.heartbeat_timeout_s * sc.time_scale
        for r in ranks:
            ts = t2 + 0.2 * unit(seed, "hb", r.index)
            pending = 0 if r is culprit else 1
            fates.ranks[r.index].glog += [
                (ts, x) for x in heartbeat_timeout(ts, r.nccl_rank, pending, fault.heartbeat_timeout_s)
            ]
        last = t2 + 0.5
    if fault.abort:
        for r in ranks:
            fates.ranks[r.index].exit_at(last + 0.3 * unit(seed, "abort", r.index), -6)
