"""Webhook alerts: receivers, the outbox written with each incident change, the sender, silences.

A server wires it in through its context (app/context.py) from the job registry (app/jobs/registry.py):
``install`` adds the outbox hook to the context's incident change hooks, ``jobs`` builds the sender and the
reminder jobs. The JSON routes are ``app.api.alerts.router``, included by create_app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.kit.background import Job
from app.store.db import transaction

if TYPE_CHECKING:  # app.context imports app.alerts.sender, which runs this package's __init__ first
    from app.context import ServerContext


def install(ctx: ServerContext) -> None:
    """The outbox hook, in every process that writes incidents: each change writes its deliveries in the
    change's own transaction."""
    from app.alerts.outbox import OutboxHook

    ctx.change_hooks[:] = [h for h in ctx.change_hooks if not isinstance(h, OutboxHook)]
    ctx.change_hooks.append(OutboxHook(ctx.settings.alert_group_wait_s))


def jobs(ctx: ServerContext) -> list[Job]:
    """The sender (every server: claims are per delivery row) and the reminders (the leader)."""
    from app.alerts import outbox
    from app.alerts.outbound import Outbound
    from app.alerts.sender import Sender, SenderConfig

    settings = ctx.settings
    sender = Sender(
        ctx.sessions,
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
    ctx.alert_sender = sender
    ctx.closers.append(sender.close)

    def reminders(now: float) -> None:
        with transaction(ctx.sessions) as s:
            outbox.send_reminders(s, now, settings.alert_reminder_interval_s, ctx.change_hooks)

    found = [Job("alert-sender", settings.alert_poll_interval_s, sender.tick)]
    if settings.alert_reminder_interval_s > 0:
        interval = min(30.0, settings.alert_reminder_interval_s / 4)
        found.append(Job("alert-reminders", interval, reminders, leader_only=True))
    return found
