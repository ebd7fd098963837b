"""What the worker takes for a redelivery of a message it already settled (see settled_recently.py):
only a byte-identical message under the same id on the same topic, and only while remembered."""

from __future__ import annotations

from deletion_service.broker.interface import Received
from deletion_service.delete_phase.consumer.settled_recently import SettledRecently


def _msg(data: bytes = b"request", message_id: str = "7:3:0:-1", topic: str = "persistent://t/n/a") -> Received:
    return Received(data=data, properties={}, topic=topic, message_id=message_id, publish_time_ms=0)


def test_a_byte_identical_redelivery_is_known_and_nothing_else_is() -> None:
    settled = SettledRecently()
    settled.add(_msg())
    assert _msg() in settled
    assert _msg(data=b"another request") not in settled, "an old id on a new message is processed, not skipped"
    assert _msg(message_id="7:4:0:-1") not in settled
    assert _msg(topic="persistent://t/n/b") not in settled
    # the parts are separated: moving bytes between topic, id and payload is a different message
    assert _msg(data=b"0:-1request", message_id="7:3:") not in settled


def test_the_oldest_is_forgotten_first_and_a_repeat_refreshes() -> None:
    settled = SettledRecently(capacity=3)
    a, b, c, d = (_msg(message_id=f"1:{i}:0:-1") for i in range(4))
    for m in (a, b, c):
        settled.add(m)
    settled.add(a)  # seen again: now the newest
    settled.add(d)
    assert len(settled) == 3
    assert b not in settled and all(m in settled for m in (a, c, d))
