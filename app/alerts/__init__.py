"""Webhook alerts: receivers, the outbox written with each incident change, the sender, silences.

``attach(app)`` wires it into a server: the outbox hook, the sender and reminder jobs, the JSON routes.
"""

from __future__ import annotations

from typing import Any

from app.jobs.background import Job
from app.store.db import transaction


def attach(app: Any) -> None:
    from app.alerts import api, outbox
    from app.alerts.sender import Sender, SenderConfig

    settings = app.state.settings
    outbox.install(settings.alert_group_wait_s)
    sender = Sender(
        app.state.sessions,
        SenderConfig(
            public_url=api.public_url(settings),
            timeout_s=settings.alert_timeout_s,
            retry_initial_s=settings.alert_retry_initial_s,
            retry_max_s=settings.alert_retry_max_s,
            give_up_after_s=settings.alert_give_up_after_s,
            receiver_concurrency=settings.alert_receiver_concurrency,
        ),
    )
    app.state.alert_sender = sender

    def reminders(now: float) -> None:
        with transaction(app.state.sessions) as s:
            outbox.send_reminders(s, now, settings.alert_reminder_interval_s)

    app.state.jobs.append(Job("alert-sender", settings.alert_poll_interval_s, sender.tick))
    if settings.alert_reminder_interval_s > 0:
        app.state.jobs.append(
            Job(
                "alert-reminders",
                min(30.0, settings.alert_reminder_interval_s / 4),
                reminders,
                leader_only=True,
            )
        )
    app.state.closers.append(sender.close)
    app.include_router(api.router)
