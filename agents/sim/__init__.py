"""Simulated cluster: scenario files in scenarios/*.toml, interpreted by SimCluster.

The contract others code against (docs/architecture.md, docs/scenarios.md)::

    from agents.sim import load_scenario, scenario_names, SimCluster
    sc = load_scenario("startup-deadlock", time_scale=1.0)
    cluster = SimCluster(sc, t0=time.time(), seed=0)
    cluster.gpu_samples(host, now); cluster.process_samples(host, now); cluster.log_lines(host, since, until)
    cluster.metrics_text(host, now); cluster.hardware_events(host, since, until)
"""

from agents.sim.cluster import SimCluster
from agents.sim.scenario import Expected, Scenario, ScenarioError, load_scenario, scenario_names
from agents.sim.timeline import SimLogLine

__all__ = [
    "Expected",
    "Scenario",
    "ScenarioError",
    "SimCluster",
    "SimLogLine",
    "load_scenario",
    "scenario_names",
]
