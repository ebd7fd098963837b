"""When a RETRY message falls due: its publish time plus its delay, never later than its delay from when it
is received (a publisher whose clock runs ahead, e.g. another replica's), never more than the longest
delay the configuration allows."""

from __future__ import annotations

from deletion_service.broker.interface import Received
from deletion_service.delete_phase.consumer.copies import due_at_ms

NOW = 1_800_000_000_000


def _retry(published_ms: int, delay_ms: str) -> Received:
    return Received(b"{}", {"DELAY_TIME": delay_ms}, "persistent://p/s/t-RETRY", "1:1", published_ms)


def test_a_copy_from_a_clock_ahead_waits_its_delay_from_now_and_no_longer() -> None:
    assert due_at_ms(_retry(NOW + 120_000, "30000"), 600, NOW) == NOW + 30_000  # was NOW + 150 s
    assert due_at_ms(_retry(NOW - 10_000, "30000"), 600, NOW) == NOW + 20_000  # its delay from when published
    assert due_at_ms(_retry(NOW, "999999999999"), 600, NOW) == NOW + 600_000  # capped by config
    assert due_at_ms(_retry(NOW, "-5"), 600, NOW) == NOW and due_at_ms(_retry(NOW, "soon"), 600, NOW) == NOW
