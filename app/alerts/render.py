"""One payload per receiver format: the dispatch over the formats' own modules. Apart from formats.py (the
shared message and its pieces), which the Slack and Alertmanager modules import: the dispatch there made a circle."""

from __future__ import annotations

from typing import Any

from app.alerts import alertmanager, slack
from app.alerts.formats import Message, generic


def render(fmt: str, msg: Message) -> dict[str, Any]:
    if fmt == "slack":
        return slack.render(msg)
    if fmt == "alertmanager":
        return alertmanager.render(msg)
    return generic(msg)
