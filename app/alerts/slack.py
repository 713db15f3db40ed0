"""Slack incoming-webhook messages: ``text`` (the notification preview) and Block Kit ``blocks`` laid out
for a phone at 2 a.m. — what and where in the header, the culprit and the evidence next, details last.

Limits respected (Slack refuses or truncates beyond them): header text 150 chars, section text 3000 chars,
10 context elements, 50 blocks per message.
"""

from __future__ import annotations

from typing import Any

from app.alerts.formats import Message, clock, evidence_line, headline, incident_url, kind_title, where
from app.store.locate import gpu_text

MAX_EVIDENCE = 6
MAX_DETAILED = 8  # incidents of a grouped message shown in full; the rest are listed by name
ICONS = {"opened": "🔴", "upgraded": "🔴", "resolved": "✅", "reminder": "⏰", "test": "🔔"}


def escape(text: str) -> str:
    """Slack's three control characters (api.slack.com "Escaping text"), so that text from the cluster (rank
    labels, log lines, summaries, host and deployment names) shows as written and can never become a
    mention (``<!channel>``, ``<@U123>``) or a masked link (``<https://evil|docs>``). Every piece of
    ``text`` and ``mrkdwn`` this module builds goes through it; ``plain_text`` is not parsed by Slack."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _incident_blocks(snap: dict[str, Any], public_url: str) -> list[dict[str, Any]]:
    culprit = snap.get("culprit")
    lead = f"*Culprit: `{escape(str(culprit))}`*" if culprit else "*No single culprit*"
    if snap.get("host"):
        lead += f" on {escape(str(snap['host']))}"
    at = snap.get("culprit_location") or {}
    if at.get("pid") is not None:
        lead += f" ({escape(gpu_text(at)) + ', ' if at.get('gpus') else ''}pid {at['pid']})"
    if at.get("command"):
        lead += f"\n`{escape(str(at['command']))}`"
    lead += f"\n*{escape(kind_title(snap['kind']))}* — {escape(snap['summary'])}"
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _clip(lead, 3000)}}
    ]
    evidence = list(snap.get("evidence") or [])
    if evidence:
        lines = [f"• {escape(evidence_line(e))}" for e in evidence[:MAX_EVIDENCE]]
        if len(evidence) > MAX_EVIDENCE:
            lines.append(f"… and {len(evidence) - MAX_EVIDENCE} more in the dashboard")
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _clip("\n".join(lines), 3000)}})
    ranks = list(snap.get("ranks") or [])
    details = [
        escape(str(snap["confidence"])),
        f"opened {clock(snap['opened_at'])}",
    ]
    if snap.get("resolved_at"):
        details.append(f"resolved {clock(snap['resolved_at'])}")
    if ranks:
        shown = ", ".join(str(r) for r in ranks[:8]) + (f" +{len(ranks) - 8}" if len(ranks) > 8 else "")
        details.append(f"ranks {escape(shown)}")
    details.append(f"<{incident_url(public_url, snap['id'])}|incident #{snap['id']}>")
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": _clip(" · ".join(details), 3000)}]}
    )
    return blocks


def render(msg: Message) -> dict[str, Any]:
    icon = ICONS.get(msg.event, "🔴")
    title = headline(msg.event, msg.incidents)
    text = f"{icon} [specwatch] {escape(title)}"
    if len(msg.incidents) == 1:
        text += f": {escape(str(msg.incidents[0]['summary']))}"
    header = f"{icon} {title}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(header, 150), "emoji": True}}
    ]
    if not msg.incidents:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": "Webhook deliveries from specwatch reach this channel."},
            }
        )
    for i, snap in enumerate(msg.incidents[:MAX_DETAILED]):
        if i:
            blocks.append({"type": "divider"})
        blocks.extend(_incident_blocks(snap, msg.public_url))
    rest = msg.incidents[MAX_DETAILED:]
    if rest:
        names = ", ".join(f"{kind_title(s['kind'])} #{s['id']}" for s in rest)
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": _clip(f"Also: {escape(names)}", 3000)}}
        )
    target = incident_url(msg.public_url, msg.incidents[0]["id"] if len(msg.incidents) == 1 else None)
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Open in specwatch"},
                    "url": target,
                }
            ],
        }
    )
    if msg.incidents:
        text_where = where(msg.incidents[0])
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": f"{escape(text_where)} · delivery {escape(msg.delivery_id)}"}
                ],
            }
        )
    return {"text": text, "blocks": blocks}
