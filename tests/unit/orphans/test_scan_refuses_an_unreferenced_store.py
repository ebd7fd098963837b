"""``scan-orphans --enqueue`` never sends when no ledger is referenced at all: a wrong --metadata-store."""

from __future__ import annotations

import pytest

from deletion_service.cli.commands.scan_orphans import refuse_unreferenced
from deletion_service.errors import UserError
from deletion_service.orphans.summary import ScanSummary


def _summary(references: int, orphans: int, objects: int = 0) -> ScanSummary:
    return ScanSummary(orphans, objects, 0, 10, 0, orphans + references, references, objects, 86_400, 1)


def test_no_reference_and_orphans_is_refused_and_any_reference_is_not() -> None:
    with pytest.raises(UserError, match="found no references to any ledger in zk://h:2181/x.*nothing was sent"):
        refuse_unreferenced(_summary(references=0, orphans=3), "zk://h:2181/x")
    with pytest.raises(UserError):
        refuse_unreferenced(_summary(references=0, orphans=0, objects=2), "zk://h:2181/x")
    refuse_unreferenced(_summary(references=1, orphans=3), "zk://h:2181/x")
    refuse_unreferenced(_summary(references=0, orphans=0), "zk://h:2181/x")  # an empty cluster: nothing to send
