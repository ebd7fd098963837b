"""scan-orphans' table (without --json) shows the summary's counts: the end-to-end tests read only
the JSON form, so a field the table misreads would pass them.  No Spark here: the table only
renders a ScanSummary, which is built by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from deletion_service.cli.commands.scan_orphans import MISSING_LOGGED, _print
from deletion_service.cli.options import CommonOptions
from deletion_service.orphans.scan import ScanOutcome
from deletion_service.orphans.summary import MissingLedger, ReportData, ScanSummary


def outcome(summary: ScanSummary) -> ScanOutcome:
    return ScanOutcome(inventories=None, results=None, data=ReportData(summary),  # type: ignore[arg-type]
                       from_snapshot=False, written=[], refused_locations={"s3://b": "access denied"})


SUMMARY = ScanSummary(orphan_ledgers=7, orphan_offloaded_objects=3, missing_ledgers=2, orphan_ledger_bytes=2048,
                      orphan_object_bytes=5 * 1024**2, scanned_ledgers=41, references=57, scanned_objects=13,
                      min_age_s=86_400, scanned_at_ms=0, orphan_ledgers_by_kind={"data": 5, "cursor": 2, "schema": 0})


def test_the_table_shows_every_count_of_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    _print(CommonOptions(), outcome(SUMMARY), {"sent": 7, "skipped": {"too young": 1}}, Path("/tmp/out"))
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("missing ledgers (referenced, absent) 2", "orphan ledgers 7 (2.0 KiB)", "data 5, cursor 2",
                  "orphan offloaded objects 3 (5.0 MiB)", "41 ledgers, 57 references, 13 objects",
                  "s3://b: access denied", "enqueued 7", "1: too young", "/tmp/out/report.html"):
        assert shown in text, shown
    assert "schema 0" not in text  # kinds without orphans are left out


def test_a_dry_run_with_orphans_says_nothing_was_sent(capsys: pytest.CaptureFixture[str]) -> None:
    _print(CommonOptions(), outcome(SUMMARY), None, None)
    text = " ".join(capsys.readouterr().out.split())
    assert "Dry run: nothing was sent" in text and "missing ledgers" in text


def test_the_json_form_is_the_summary_with_what_was_done(capsys: pytest.CaptureFixture[str]) -> None:
    _print(CommonOptions(json=True), outcome(SUMMARY), None, None)
    out = capsys.readouterr().out
    assert '"orphanLedgers": 7' in out and '"orphanObjectBytes": 5242880' in out and '"notListed": {"s3://b"' in out


def test_no_missing_ledgers_is_still_a_row(capsys: pytest.CaptureFixture[str]) -> None:
    """The data-loss alarm shows 0 too: a row that appears only when there is trouble reads, when
    absent, the same as a scan that never looked."""
    _print(CommonOptions(), outcome(replace(SUMMARY, missing_ledgers=0)), None, None)
    text = " ".join(capsys.readouterr().out.split())
    assert "missing ledgers (referenced, absent) 0" in text


def test_missing_ledgers_are_named_then_counted(capsys: pytest.CaptureFixture[str]) -> None:
    """A CronJob's log is where an operator looks first: it names the missing ledgers."""
    missing = [MissingLedger(100 + i, "ledger", "persistent://t/ns/x", None) for i in range(MISSING_LOGGED)]
    data = ReportData(replace(SUMMARY, missing_ledgers=MISSING_LOGGED + 5), missing=missing)
    done = ScanOutcome(inventories=None, results=None, data=data, from_snapshot=False,  # type: ignore[arg-type]
                       written=[])
    _print(CommonOptions(), done, None, None)
    lines = capsys.readouterr().out.splitlines()
    assert "missing ledger 100: referenced as ledger by persistent://t/ns/x" in lines
    assert "… and 5 more missing ledgers (all in missing_ledgers.parquet)" in lines
    _print(CommonOptions(json=True), done, None, None)
    assert json.loads(capsys.readouterr().out)["missing"][0] == {"ledgerId": 100, "kind": "ledger",
                                                                 "topic": "persistent://t/ns/x"}
