"""Rendering one outbox message into the body a receiver expects (pure: snapshots in, JSON-able dict out).

A message announces one change (``opened``, ``upgraded``, ``resolved``, ``reminder``) of one or more
incidents of one launch. It is rendered from the snapshots stored in the outbox row, so every retry sends the
same body. Formats: ``generic`` (below), ``slack`` (app/alerts/slack.py), ``alertmanager``
(app/alerts/alertmanager.py). docs/alerts.md documents each with an example.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from agents.wire import IncidentKind

FORMATS = ("generic", "slack", "alertmanager")
EVENTS = ("opened", "upgraded", "resolved", "reminder", "test")

# one title per incident kind (agents/wire.py), and the test message's
KIND_TITLES: dict[IncidentKind | Literal["test"], str] = {
    "suspected_deadlock": "Suspected deadlock",
    "nccl_timeout": "NCCL collective timeout",
    "watchdog_timeout": "Scheduler watchdog timeout",
    "rank_crashed": "Rank crashed",
    "rank_divergence": "Rank diverged from its peers",
    "stalled_serving": "Serving stalled",
    "low_acceptance": "Low speculative acceptance",
    "acceptance_drift": "Speculative acceptance drifted below its baseline",
    "gpu_xid": "GPU XID error",
    "agent_silent": "Agent silent",
    "test": "Test message",
}


@dataclass(frozen=True, slots=True)
class Message:
    delivery_id: str
    event: str
    created_at: float
    incidents: list[dict[str, Any]]  # snapshots written by app/alerts/outbox.snapshot
    receiver: str
    public_url: str


def iso(ts: float | None) -> str | None:
    """RFC 3339 in UTC with milliseconds: what Go's time.Time, JavaScript and Python all parse."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S UTC")


def kind_title(kind: str) -> str:
    titles: dict[str, str] = KIND_TITLES  # type: ignore[assignment]  # looked up by any stored kind
    return titles.get(kind, kind.replace("_", " ").capitalize())


def incident_url(public_url: str, incident_id: int | None) -> str:
    base = public_url.rstrip("/")
    return f"{base}/incidents/{incident_id}" if incident_id is not None else base


def where(snap: dict[str, Any]) -> str:
    """``kimi-k25-eagle3 launch 12`` / ``host gpu-node-07``: where a person should look."""
    parts = []
    if snap.get("deployment"):
        parts.append(str(snap["deployment"]))
    if snap.get("launch_id") is not None:
        parts.append(f"launch {snap['launch_id']}")
    if not parts and snap.get("host"):
        parts.append(f"host {snap['host']}")
    return " ".join(parts) or "specwatch"


def evidence_line(item: dict[str, Any]) -> str:
    """One evidence item as a person reads it: rank, what, value, time."""
    rank = f"{item['rank']} " if item.get("rank") else ""
    value = item.get("value")
    shown = "" if value is None or value == "" else f": {value}"
    ts = item.get("ts")
    at = f" ({clock(float(ts))})" if isinstance(ts, int | float) else ""
    return f"{rank}{item.get('what', '')}{shown}{at}"


def headline(event: str, incidents: list[dict[str, Any]]) -> str:
    """One sentence for notification previews: status, what, where, culprit."""
    if not incidents:
        return "specwatch test message: this receiver is configured correctly"
    first = incidents[0]
    prefix = {
        "opened": "",
        "upgraded": "Confirmed: ",
        "resolved": "Resolved: ",
        "reminder": "Still open: ",
    }.get(event, "")
    if event == "resolved" and all(s.get("status") == "ended" for s in incidents):
        prefix = "Ended with the launch: "
    if len(incidents) > 1:
        kinds = ", ".join(sorted({kind_title(s["kind"]) for s in incidents}))
        return f"{prefix}{len(incidents)} incidents on {where(first)} ({kinds})"
    culprit = f", culprit {first['culprit']}" if first.get("culprit") else ""
    return f"{prefix}{kind_title(first['kind'])} on {where(first)}{culprit}"


def generic(msg: Message) -> dict[str, Any]:
    first = msg.incidents[0] if msg.incidents else {}
    return {
        "version": "1",
        "delivery_id": msg.delivery_id,
        "event": msg.event,
        "created_at": iso(msg.created_at),
        "title": headline(msg.event, msg.incidents),
        "deployment": first.get("deployment"),
        "launch_id": first.get("launch_id"),
        "incidents": [
            {
                "id": s["id"],
                "kind": s["kind"],
                "status": s["status"],
                "confidence": s["confidence"],
                "severity": s["severity"],
                "summary": s["summary"],
                "culprit": s.get("culprit"),
                # host, pid, GPUs and the py-spy command for the culprit (null without one)
                "culprit_location": s.get("culprit_location"),
                "ranks": list(s.get("ranks") or []),
                "evidence": [
                    {**e, "ts": iso(e["ts"]) if isinstance(e.get("ts"), int | float) else e.get("ts")}
                    for e in s.get("evidence") or []
                ],
                "launch_id": s.get("launch_id"),
                "deployment": s.get("deployment"),
                "host": s.get("host"),
                "opened_at": iso(s.get("opened_at")),
                "resolved_at": iso(s.get("resolved_at")),
                "url": incident_url(msg.public_url, s["id"]),
            }
            for s in msg.incidents
        ],
    }
