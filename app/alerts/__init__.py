"""Webhook alerts: receivers, the outbox written with each incident change, the sender, silences.

A server's wiring (app/context.py, app/main.py) takes two things from here through the job registry
(app/jobs/registry.py): ``outbox_hook``, one of the context's incident change hooks, and ``new_sender`` with
its ``jobs``. The JSON routes are ``app.api.alerts.router``, included by create_app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.kit.background import Job
from app.store.db import transaction

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from app.alerts.sender import Sender
    from app.detector.incidents import ChangeHook, Hooks
    from app.settings import Settings


def outbox_hook(settings: Settings) -> ChangeHook:
    """The outbox hook, in every process that writes incidents: each change writes its deliveries in the
    change's own transaction."""
    from app.alerts.outbox import OutboxHook

    return OutboxHook(settings.alert_group_wait_s)


def new_sender(settings: Settings, sessions: sessionmaker[Session]) -> Sender:
    """The webhook sender; its ``close`` waits for the webhooks in flight at shutdown."""
    from app.alerts.outbound import Outbound
    from app.alerts.sender import Sender, SenderConfig

    return Sender(
        sessions,
        SenderConfig(
            public_url=settings.dashboard_url(),
            timeout_s=settings.alert_timeout_s,
            retry_initial_s=settings.alert_retry_initial_s,
            retry_max_s=settings.alert_retry_max_s,
            give_up_after_s=settings.alert_give_up_after_s,
            receiver_concurrency=settings.alert_receiver_concurrency,
            outbound=Outbound.of(settings),
        ),
    )


def jobs(settings: Settings, sessions: sessionmaker[Session], sender: Sender, hooks: Hooks) -> list[Job]:
    """The sender's job (every server: claims are per delivery row) and the reminders (the leader), which
    record each reminder through ``hooks`` like any other incident change."""
    from app.alerts import outbox

    def reminders(now: float) -> None:
        with transaction(sessions) as s:
            outbox.send_reminders(s, now, settings.alert_reminder_interval_s, hooks)

    found = [Job("alert-sender", settings.alert_poll_interval_s, sender.tick)]
    if settings.alert_reminder_interval_s > 0:
        interval = min(30.0, settings.alert_reminder_interval_s / 4)
        found.append(Job("alert-reminders", interval, reminders, leader_only=True))
    return found
