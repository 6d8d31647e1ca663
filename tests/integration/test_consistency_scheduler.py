"""The reconcile schedule: crontab strings, time zones, jitter, job options, and one real run.

No test waits for a real cron tick: next fire times are computed from fixed instants, and one
short interval trigger shows that the scheduled job really reconciles and writes its report
(dense path off, ``embedding.model = "none"``, so the job is quick).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hybridsag.consistency import (
    build_scheduler,
    cron_trigger,
    latest_report,
    list_reports,
)
from hybridsag.consistency.scheduler import JOB_ID
from hybridsag.errors import ConfigError
from hybridsag.search import HybridSearch
from hybridsag.settings import ConsistencySettings, EmbeddingSettings, Settings

BERLIN = ZoneInfo("Europe/Berlin")


def _next(expr: str, now: datetime, tz: str = "Europe/Berlin") -> datetime:
    trigger = cron_trigger(expr, tz)
    fire = trigger.get_next_fire_time(None, now)
    assert fire is not None
    return fire


def test_default_is_nightly_at_three_in_the_configured_zone() -> None:
    c = ConsistencySettings()
    assert (c.cron, c.timezone) == ("0 3 * * *", "UTC")
    now = datetime(2026, 6, 10, 12, 0, tzinfo=BERLIN)
    assert _next(c.cron, now) == datetime(2026, 6, 11, 3, 0, tzinfo=BERLIN)
    # 03:00 Berlin is 01:00 UTC in summer
    assert _next(c.cron, now).astimezone(ZoneInfo("UTC")).hour == 1
    assert _next(c.cron, now, "UTC") == datetime(2026, 6, 11, 3, 0, tzinfo=ZoneInfo("UTC"))


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 3 * * 0", datetime(2026, 6, 14, 3, 0)),  # crontab 0 = Sunday (APScheduler: Monday)
        ("0 3 * * 7", datetime(2026, 6, 14, 3, 0)),  # 7 = Sunday too
        ("0 3 * * 1-5", datetime(2026, 6, 11, 3, 0)),  # weekdays: Thursday next
        ("0 3 * * 6", datetime(2026, 6, 13, 3, 0)),  # Saturday
        ("0 3 * * sat,sun", datetime(2026, 6, 13, 3, 0)),
        ("30 4 1 * *", datetime(2026, 7, 1, 4, 30)),
        ("*/15 * * * *", datetime(2026, 6, 10, 12, 15)),
    ],
)
def test_crontab_fields(expr: str, expected: datetime) -> None:
    now = datetime(2026, 6, 10, 12, 1, tzinfo=BERLIN)  # a Wednesday
    assert _next(expr, now) == expected.replace(tzinfo=BERLIN)


@pytest.mark.parametrize(
    ("expr", "tz", "match"),
    [
        ("0 3 * *", "UTC", "5 fields"),
        ("0 25 * * *", "UTC", "not a valid crontab"),
        ("0 3 * * 8", "UTC", "0..7"),
        ("0 3 * * 5-1", "UTC", "backwards"),
        ("0 3 * * *", "Mars/Olympus", "consistency.timezone"),
    ],
)
def test_bad_schedules_are_config_errors(expr: str, tz: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cron_trigger(expr, tz)


def _settings(data: Path, **consistency: object) -> Settings:
    return Settings(
        data_dir=data,
        embedding=EmbeddingSettings(model="none"),
        consistency=ConsistencySettings(**consistency),  # type: ignore[arg-type]
    )


def test_scheduler_job_options_and_next_fire_time(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "data", cron="0 3 * * *", timezone="Asia/Shanghai",
                         jitter_s=120)
    scheduler = build_scheduler(settings)
    scheduler.start(paused=True)
    try:
        job = scheduler.get_job(JOB_ID)
        assert job.max_instances == 1 and job.coalesce is True
        assert job.trigger.jitter == 120
        tz = ZoneInfo("Asia/Shanghai")
        now = datetime.now(tz)
        nominal = (now + timedelta(days=1 if now.hour >= 3 else 0)).replace(
            hour=3, minute=0, second=0, microsecond=0
        )
        assert abs((job.next_run_time - nominal).total_seconds()) <= 120
        assert job.next_run_time.utcoffset() == timedelta(hours=8)
    finally:
        scheduler.shutdown(wait=False)


def test_a_scheduled_run_reconciles_and_writes_a_report(tmp_path: Path) -> None:
    from apscheduler.triggers.interval import IntervalTrigger

    data = tmp_path / "data"
    settings = _settings(data)
    with HybridSearch(settings) as hs:
        hs.ingest("alpha", "The alpha page says alphaword.", title="Alpha")
        with hs.components.store.atomic() as c:  # a stray FTS row for the job to find
            c.execute(
                "INSERT INTO chunks_fts(rowid, title, heading, body) VALUES (99, '', '', 'z')"
            )
    scheduler = build_scheduler(settings, trigger=IntervalTrigger(seconds=0.3))
    scheduler.start()
    try:
        deadline = time.monotonic() + 30
        while not list_reports(settings.reports_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        scheduler.shutdown(wait=True)
    report = latest_report(settings.reports_dir)
    assert report is not None, "the scheduled job did not run"
    first = sorted(list_reports(settings.reports_dir))[0]
    data_first = json.loads(first.read_text())
    assert data_first["ok"] and data_first["dry_run"] is False
    assert data_first["counts_before"]["orphan_fts_rows"] == 1
    assert data_first["counts_after"]["orphan_fts_rows"] == 0
    assert data_first["totals_before"]["dense_checked"] is False
