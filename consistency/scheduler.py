"""Run the reconciler on a cron schedule with APScheduler 3.11.

``consistency.cron`` is a standard five-field crontab string (minute, hour, day of month, month,
day of week; default ``"0 3 * * *"``, nightly at 03:00) read in ``consistency.timezone``.
APScheduler 3.x numbers weekdays from Monday = 0, crontab from Sunday = 0 (its
``CronTrigger.from_crontab`` passes numbers through unchanged, a documented 3.x mistake), so
:func:`cron_trigger` turns crontab weekday numbers into names first. ``consistency.jitter_s``
moves each run by up to that many seconds either way (APScheduler's ``jitter``), so many
instances do not all start at once. The job has ``max_instances=1`` and ``coalesce=True``:
a run still going when the next is due is never doubled, and missed runs collapse into one. The
lease in the store keeps other processes' reconcilers out as well.

Each run opens its own :class:`~hybridsag.consistency.Reconciler` (and so its own Milvus Lite
handle) and closes it afterwards, so that other processes can use the data dir between runs.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hybridsag.errors import ConfigError, HybridSagError
from hybridsag.settings import Settings

from hybridsag.consistency.reconciler import Reconciler

if TYPE_CHECKING:  # pragma: no cover - typing only
    from apscheduler.schedulers.base import BaseScheduler
    from apscheduler.triggers.base import BaseTrigger

    from hybridsag.vectors.embedder import Embedder
    from hybridsag.components import Components

__all__ = ["JOB_ID", "build_scheduler", "cron_trigger", "reconcile_once", "run_scheduler"]

JOB_ID = "hybridsag-reconcile"

logger = logging.getLogger(__name__)

_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab numbering, 0 = Sunday
_APS_ORDER = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # APScheduler's, 0 = Monday
_DOW_PART = re.compile(r"^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(\d+))?$")


def _crontab_day(token: str, expr: str) -> int:
    if token.isdigit():
        n = int(token)
        if n > 7:
            raise ConfigError(f"consistency.cron={expr!r}: day of week {n} is not in 0..7")
        return n % 7
    if token[:3] in _DAY_NAMES and len(token) == 3:
        return _DAY_NAMES.index(token)
    raise ConfigError(
        f"consistency.cron={expr!r}: day of week {token!r} is not 0..7 or one of {_DAY_NAMES}"
    )


def _day_of_week(field: str, expr: str) -> str:
    """A crontab day-of-week field as APScheduler 3.x reads it (comma list of day names)."""
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.lower().split(","):
        m = _DOW_PART.match(part)
        if not m:
            raise ConfigError(f"consistency.cron={expr!r}: cannot read day of week {part!r}")
        base, step = m.group(1), int(m.group(2) or 1)
        if step < 1:
            raise ConfigError(f"consistency.cron={expr!r}: step 0 in day of week {part!r}")
        if base == "*":
            lo, hi = 0, 6
        elif "-" in base:
            a, b = base.split("-")
            lo, hi = _crontab_day(a, expr), _crontab_day(b, expr)
            if b.isdigit() and int(b) == 7:
                hi = 7
        else:
            lo = hi = _crontab_day(base, expr)
            if m.group(2):
                hi = 6
        if lo > hi:
            raise ConfigError(f"consistency.cron={expr!r}: day range {part!r} runs backwards")
        days.update(d % 7 for d in range(lo, hi + 1, step))
    return ",".join(d for d in _APS_ORDER if _DAY_NAMES.index(d) in days)


def cron_trigger(expr: str, timezone: str, *, jitter_s: int = 0) -> BaseTrigger:
    """An APScheduler ``CronTrigger`` for a five-field crontab string in ``timezone``.

    Raises:
        ConfigError: not five fields, a field APScheduler rejects, or an unknown time zone; the
            message names the setting.

    >>> cron_trigger("0 3 * * 1-5", "UTC")      # doctest: +SKIP
    <CronTrigger (month='*', day='*', day_of_week='mon,tue,wed,thu,fri', hour='3', minute='0', ...)>
    """
    from apscheduler.triggers.cron import CronTrigger

    try:
        tz = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(
            f"consistency.timezone={timezone!r} is not a known IANA time zone (e.g. 'UTC', "
            "'Europe/Berlin', 'Asia/Shanghai')"
        ) from exc
    fields = expr.split()
    if len(fields) != 5:
        raise ConfigError(
            f"consistency.cron={expr!r} must have 5 fields (minute hour day month weekday), "
            f"got {len(fields)}"
        )
    minute, hour, day, month, dow = fields
    try:
        return CronTrigger(
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=_day_of_week(dow, expr),
            timezone=tz,
            jitter=jitter_s or None,
        )
    except ValueError as exc:
        raise ConfigError(
            f"consistency.cron={expr!r} is not a valid crontab string: {exc}"
        ) from exc


def reconcile_once(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    force: bool = False,
    components: Components | None = None,
) -> dict[str, Any] | None:
    """One scheduled run: open a reconciler, run it, close it. Errors are logged, not raised
    (the scheduler must live on); returns the report, or None when the run failed or was
    refused. ``components``: run over these open components (a service's own, which hold the
    Milvus Lite handle) instead of building new ones."""
    try:
        if components is not None:
            report = Reconciler(components).run(force=force)
        else:
            with Reconciler.from_settings(settings, embedder=embedder) as rec:
                report = rec.run(force=force)
    except HybridSagError as exc:
        logger.error("scheduled reconcile did not complete: %s", exc)
        return None
    logger.info(
        "scheduled reconcile done: before %s after %s (%s)",
        report["counts_before"],
        report["counts_after"],
        report["path"],
    )
    return report


def build_scheduler(
    settings: Settings,
    *,
    blocking: bool = False,
    trigger: BaseTrigger | None = None,
    embedder: Embedder | None = None,
    components: Components | None = None,
) -> BaseScheduler:
    """A not-yet-started scheduler with the reconcile job (id :data:`JOB_ID`).

    ``trigger`` defaults to :func:`cron_trigger` of ``consistency.cron``/``timezone``/
    ``jitter_s``; ``embedder`` is handed to every run (a long-lived process loads it once);
    ``components`` makes every run use those open components (see :func:`reconcile_once`).
    """
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.schedulers.blocking import BlockingScheduler

    c = settings.consistency
    if trigger is None:
        trigger = cron_trigger(c.cron, c.timezone, jitter_s=c.jitter_s)
    tz = getattr(trigger, "timezone", None) or ZoneInfo(c.timezone)
    cls = BlockingScheduler if blocking else BackgroundScheduler
    scheduler = cls(timezone=tz)
    scheduler.add_job(
        reconcile_once,
        trigger=trigger,
        kwargs={"settings": settings, "embedder": embedder, "components": components},
        id=JOB_ID,
        name="hybridsag reconcile",
        max_instances=1,
        coalesce=True,
        replace_existing=True,
    )
    return scheduler


def run_scheduler(settings: Settings, *, blocking: bool = True) -> BaseScheduler:
    """Build and start the scheduler. ``blocking=True`` runs in the foreground until
    interrupted (``hybridsag reconcile --schedule``); otherwise it returns the running
    ``BackgroundScheduler`` (call ``shutdown()`` to stop it)."""
    scheduler = build_scheduler(settings, blocking=blocking)
    logger.info(
        "reconcile scheduled: cron %r in %s",
        settings.consistency.cron,
        settings.consistency.timezone,
    )
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        if scheduler.running:
            scheduler.shutdown(wait=False)
    return scheduler
