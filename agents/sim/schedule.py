"""The seed-free skeleton of a launch: when each start-up step begins and ends, when faults strike, and
when each expected incident's onset is.

Ranks of a launch meet at a collective at the end of every start-up step, so a step starts for everyone at
the same barrier time; the seed only moves individual ranks by fractions of a second inside a step. That keeps
onsets (and so ``Scenario.expected``) independent of the seed.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.sim.spec import ExpectedSpec, FaultSpec, ScenarioSpec

# Steps in SGLang's order with an EAGLE draft: the target worker loads, allocates KV and captures graphs,
# then the draft worker loads and captures its own graphs, then the server warms up and is ready.
PHASE_OF_STEP = {
    "import": "starting",
    "dist_init": "dist_init",
    "load_target": "loading_weights",
    "kv_alloc": "kv_alloc",
    "capture_target": "cuda_graph_capture",
    "load_draft": "loading_weights",
    "capture_draft": "cuda_graph_capture",
    "capture_draft_extend": "cuda_graph_capture",
    "warmup": "warmup",
}
DECODE_STEPS_PER_REPORT = 40  # SGLang logs decode stats (and refreshes gauges) every 40 decode steps


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    phase: str
    start: float  # seconds after t0
    end: float
    marks: int  # progress marks a healthy rank shows in this step (shards, capture batches, log lines)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def progress_interval(self) -> float:
        return self.duration / self.marks


@dataclass(frozen=True, slots=True)
class Schedule:
    steps: tuple[Step, ...]
    ready_at: float  # seconds after t0: serving begins
    decode_interval_s: float  # seconds between two decode stats lines (not scaled: it is a rate)
    scale: float

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def step_at(self, t: float) -> Step | None:
        for s in self.steps:
            if s.start <= t < s.end:
                return s
        return None

    def fault_time(self, fault: FaultSpec) -> float:
        if fault.at_s is not None:
            return fault.at_s * self.scale
        if fault.serving_s is not None:
            return self.ready_at + fault.serving_s * self.scale
        assert fault.step is not None
        s = self.step(fault.step)
        return s.start + fault.within * s.duration

    def next_progress_due(self, t: float) -> float:
        """When a healthy rank would next show progress after ``t``: one progress interval later."""
        s = self.step_at(t)
        return t + (s.progress_interval if s else self.decode_interval_s)

    def timeout_time(self, fault: FaultSpec) -> float:
        return self.wait_start(fault) + fault.collective_timeout_s * self.scale

    def wait_start(self, fault: FaultSpec) -> float:
        """When the culprit's peers enqueue the collective it never joins (the end of its current step)."""
        t = self.fault_time(fault)
        s = self.step_at(t)
        if s is None or fault.within == 0 or fault.step is None or fault.lockstep:
            return t
        return s.end

    def onset(self, spec: ScenarioSpec, exp: ExpectedSpec) -> float:
        if isinstance(exp.onset, float | int):
            return float(exp.onset) * self.scale
        if exp.onset == "serving":
            return self.ready_at + self.decode_interval_s
        fault = spec.faults[exp.fault]
        if exp.onset == "fault":
            return self.fault_time(fault)
        if exp.onset == "timeout":
            return self.timeout_time(fault)
        return self.next_progress_due(self.fault_time(fault))


def build_schedule(spec: ScenarioSpec, scale: float) -> Schedule:
    st, m = spec.startup, spec.model
    plan: list[tuple[str, float, int]] = [
        ("import", st.import_s, 1),
        ("dist_init", st.dist_init_s, 1),
        ("load_target", st.load_s, m.shards),
        ("kv_alloc", st.kv_alloc_s, 1),
        ("capture_target", st.jit_s + st.capture_target_s, st.capture_batches),
    ]
    if m.speculative:
        plan += [
            ("load_draft", st.draft_load_s, 1),
            ("capture_draft", st.capture_draft_s, st.capture_batches),
        ]
        if st.capture_draft_extend_s > 0:
            plan.append(("capture_draft_extend", st.capture_draft_extend_s, st.capture_batches))
    plan.append(("warmup", st.warmup_s, 1))
    steps: list[Step] = []
    t = 0.0
    for name, dur, marks in plan:
        steps.append(Step(name, PHASE_OF_STEP[name], t, t + dur * scale, marks))
        t += dur * scale
    interval = DECODE_STEPS_PER_REPORT * spec.serving.step_ms / 1000.0
    return Schedule(tuple(steps), t, interval, scale)
