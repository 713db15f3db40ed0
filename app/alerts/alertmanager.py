"""A body identical in shape to Prometheus Alertmanager's webhook (version "4"), so receivers written for
Alertmanager (PagerDuty/Opsgenie bridges, alertmanager-webhook-logger, custom Go handlers decoding
``template.Data``) take specwatch's alerts unchanged.

Each incident is one alert whose labels identify it; ``fingerprint`` is computed exactly as Alertmanager
computes it (FNV-1a 64 over the sorted label pairs), so deduplicating consumers agree with it.
"""

from __future__ import annotations

from typing import Any

from app.alerts.formats import Message, evidence_line, headline, incident_url, iso, kind_title

ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time: what Alertmanager sends for a firing alert
_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_SEPARATOR = 0xFF


def fingerprint(labels: dict[str, str]) -> str:
    """prometheus/common model.LabelSet.Fingerprint(), as 16 hex digits."""
    h = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode():
                h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
            h = ((h ^ _SEPARATOR) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def labels_of(snap: dict[str, Any]) -> dict[str, str]:
    raw = {
        "alertname": snap["kind"],
        "severity": snap.get("severity") or "critical",
        "confidence": snap.get("confidence") or "",
        "deployment": snap.get("deployment") or "",
        "launch": "" if snap.get("launch_id") is None else str(snap["launch_id"]),
        "host": snap.get("host") or "",
        "culprit": snap.get("culprit") or "",
        "incident_id": str(snap["id"]),
        "source": "specwatch",
    }
    # Alertmanager treats an empty label as absent; leaving them out keeps fingerprints comparable
    return {k: v for k, v in raw.items() if v != ""}


def _annotations(snap: dict[str, Any], public_url: str) -> dict[str, str]:
    evidence = [evidence_line(e) for e in snap.get("evidence") or []]
    out = {
        "summary": snap["summary"],
        "title": kind_title(snap["kind"]),
        "dashboard": incident_url(public_url, snap["id"]),
    }
    if evidence:
        out["description"] = "\n".join(evidence[:20])
    if snap.get("ranks"):
        out["ranks"] = ",".join(str(r) for r in snap["ranks"])
    at = snap.get("culprit_location") or {}
    if at.get("command"):  # where the culprit runs, ready to paste: ssh HOST sudo py-spy dump --pid N
        out["debug_command"] = str(at["command"])
    return out


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}


def _test_snapshot(msg: Message) -> dict[str, Any]:
    return {
        "id": 0,
        "kind": "SpecwatchTest",
        "severity": "info",
        "confidence": "confirmed",
        "summary": headline("test", []),
        "status": "resolved",
        "opened_at": msg.created_at,
        "resolved_at": msg.created_at,
    }


def render(msg: Message) -> dict[str, Any]:
    snaps = msg.incidents or [_test_snapshot(msg)]
    alerts: list[dict[str, Any]] = []
    for snap in snaps:
        labels = labels_of(snap)
        # an incident that ended with its launch is no longer firing: the overview keeps it as the cause
        resolved = snap.get("status") in ("resolved", "ended")
        alerts.append(
            {
                "status": "resolved" if resolved else "firing",
                "labels": labels,
                "annotations": _annotations(snap, msg.public_url),
                "startsAt": iso(snap["opened_at"]),
                "endsAt": iso(snap.get("resolved_at") or msg.created_at) if resolved else ZERO_TIME,
                "generatorURL": incident_url(msg.public_url, snap["id"] or None),
                "fingerprint": fingerprint(labels),
            }
        )
    common_labels = _common([a["labels"] for a in alerts])
    keys: tuple[str, ...] = ("deployment", "launch")
    if not any(k in common_labels for k in keys):
        keys = ("alertname",)
    group_labels = {k: common_labels[k] for k in keys if k in common_labels}
    group_key = "{}:{" + ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items())) + "}"
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "receiver": msg.receiver,
        "groupLabels": group_labels,
        "commonLabels": common_labels,
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": msg.public_url.rstrip("/"),
        "alerts": alerts,
    }
