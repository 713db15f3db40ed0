"""Loading scenario files: ``load_scenario(name, time_scale)`` and ``scenario_names()``.

A scenario file may start from another one (``base = "healthy"``): tables are merged key by key and the file's
own values win, so a fault scenario only states what differs from a healthy launch.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agents.sim.schedule import Schedule, build_schedule
from agents.sim.spec import ScenarioSpec

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class Expected:
    """One incident a correct detector opens. ``onset_s`` is seconds after t0 (see docs/scenarios.md)."""

    kind: str
    culprit: str | None
    onset_s: float
    # Kinds that count as the same detection (a detector may name a stall before the engine's timeout does).
    also_accept: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    path: Path
    spec: ScenarioSpec
    time_scale: float
    schedule: Schedule
    expected: list[Expected]

    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def deployment(self) -> str:
        return self.spec.deployment

    @property
    def engine(self) -> str:
        return self.spec.engine

    @property
    def hosts(self) -> list[str]:
        return list(self.spec.cluster.hosts)

    @property
    def duration_s(self) -> float:
        return self.spec.duration_s * self.time_scale

    @property
    def healthy(self) -> bool:
        return not self.expected

    @property
    def consequences(self) -> list[str]:
        """Incident kinds a detector may also open after the fault without it being a false positive."""
        return list(self.spec.consequences)

    @property
    def ready_s(self) -> float:
        """Seconds after t0 at which the server is ready, had nothing gone wrong."""
        return self.schedule.ready_at


def scenario_names(directory: Path = SCENARIO_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.toml"))


def load_scenario(name: str, time_scale: float = 1.0, directory: Path = SCENARIO_DIR) -> Scenario:
    """Load ``<directory>/<name>.toml`` (or a path to a .toml file) with every duration times ``time_scale``."""
    if not time_scale > 0:
        raise ScenarioError(f"time_scale must be > 0, got {time_scale}")
    path = Path(name) if name.endswith(".toml") else directory / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(scenario_names(directory)) or "none"
        raise ScenarioError(f"no scenario {name!r} (no file {path}); known scenarios: {known}")
    raw = _read_with_base(path, seen=())
    try:
        spec = ScenarioSpec.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(_describe(path, exc)) from None
    _check_ranks(path, spec)
    schedule = build_schedule(spec, time_scale)
    expected = [
        Expected(e.kind, e.culprit, schedule.onset(spec, e), tuple(e.also_accept)) for e in spec.expected
    ]
    return Scenario(path.stem, path, spec, time_scale, schedule, expected)


def _read_with_base(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    if path in seen:
        raise ScenarioError(f"{path}: field 'base': scenarios inherit from each other in a loop")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str):
        raise ScenarioError(f"{path}: field 'base' must be a scenario name, got {base!r}")
    base_path = path.parent / f"{base}.toml"
    if not base_path.is_file():
        raise ScenarioError(f"{path}: field 'base': no scenario file {base_path.name} beside it")
    return _merge(_read_with_base(base_path, (*seen, path)), raw)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _describe(path: Path, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (misspelt?)"
        # a check across fields (top level) names its field in the message itself
        problems.append(f"field '{field}': {msg}" if field else msg)
    return f"{path}: " + "; ".join(problems)


def _check_ranks(path: Path, spec: ScenarioSpec) -> None:
    from agents.sim.topology import rank_labels

    labels = rank_labels(spec.cluster)
    for i, fault in enumerate(spec.faults):
        if fault.rank is not None and fault.rank not in labels:
            raise ScenarioError(
                f"{path}: field 'faults.{i}.rank': no rank {fault.rank!r} in this cluster "
                f"(ranks: {', '.join(labels[:4])}{', ...' if len(labels) > 4 else ''})"
            )
    for i, exp in enumerate(spec.expected):
        if exp.culprit is not None and exp.culprit not in labels:
            raise ScenarioError(
                f"{path}: field 'expected.{i}.culprit': no rank {exp.culprit!r} in this cluster"
            )
