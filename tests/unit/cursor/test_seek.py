"""The seek epoch: messages read before a seek never reach the application after it."""

from __future__ import annotations

import pytest

from deletion_service.cursor import (
    ClientConsumer,
    ConsumerEpoch,
    CursorEpochConflictError,
    Dispatcher,
    EntryLog,
    ManagedCursor,
    Message,
    Position,
)
from deletion_service.cursor.seek import SeekCommand

P = Position


def _reader(cursor_checks: bool, filter_enabled: bool = True) -> tuple[Dispatcher, ClientConsumer]:
    d = Dispatcher(ManagedCursor("reader", P(5, -1), epoch_checks=cursor_checks), EntryLog.of({5: 20}))
    client = ClientConsumer("r", filter_enabled=filter_enabled)
    d.add_consumer(client)
    return d, client


def _seek_with_read_in_flight(d: Dispatcher, client: ClientConsumer) -> list[Message]:
    """Queue holds 5:0..5:4 (unread by the app), 5:5..5:9 in flight; seek to 5:2; then everything lands."""
    d.read_more().complete()
    stale = d.read_more()
    assert d.handle_seek("r", client.seek(P(5, 2)))
    stale.complete()
    d.read_more().complete()
    return client.receive_all()


def test_seek_epoch_alone_fences_stale_messages() -> None:
    """Even with the cursor epoch off (pre-PIP-269 broker), the consumer epoch drops pre-seek reads."""
    d, client = _reader(cursor_checks=False)
    got = _seek_with_read_in_flight(d, client)
    assert got and all(m.consumer_epoch == 1 for m in got)  # only what was read after the seek
    assert {m.consumer_epoch for m in client.dropped} == {0}
    assert {m.position for m in client.dropped} == {P(5, e) for e in range(10)}
    # (Without the cursor epoch the stale read still moved the read position past 5:2..5:9 —
    # Scenario-2's stuck — which is the cursor epoch's job, not the seek epoch's.)
    assert [m.position for m in got][0] == P(5, 10)


def test_with_both_epochs_the_stale_read_is_discarded_at_the_broker() -> None:
    d, client = _reader(cursor_checks=True)
    got = _seek_with_read_in_flight(d, client)
    assert [m.position for m in got] == [P(5, e) for e in range(2, 7)]
    assert [m.position for m in client.dropped] == [P(5, e) for e in range(5)]  # the pre-seek queue only


def test_without_the_filter_pre_seek_messages_leak() -> None:
    d, client = _reader(cursor_checks=False, filter_enabled=False)
    got = [m.position for m in _seek_with_read_in_flight(d, client)]
    assert got[:10] == [P(5, e) for e in range(10)]  # pre-seek messages reach the app after seek()


def test_the_server_epoch_never_goes_down_and_a_seek_without_a_bigger_one_still_seeks() -> None:
    """The proposal says only that the server epoch never goes down.  A seek
    carrying no bigger epoch (an older client sends 0) is still a seek: the cursor moves, the
    consumer epoch stays.  Refused outright, old clients could not seek at all."""
    e = ConsumerEpoch()
    assert e.advance(2) and not e.advance(2) and not e.advance(1) and e.value == 2
    d, client = _reader(cursor_checks=True)
    cmd = client.seek(P(5, 3))
    assert d.handle_seek("r", cmd)
    consumer_epoch, cursor_epoch = d.consumers["r"].epoch.value, d.cursor.epoch
    d.read_more().complete()  # reads on from 5:3
    assert d.handle_seek("r", SeekCommand(consumer_epoch=0, position=P(5, 1)))
    assert d.consumers["r"].epoch.value == consumer_epoch, "the server epoch went down"
    assert d.cursor.epoch == cursor_epoch + 1 and d.cursor.read_position == P(5, 1), "the seek did not seek"


def test_reconnect_resets_the_broker_side_epoch_and_the_queue() -> None:
    d, client = _reader(cursor_checks=True)
    d.read_more().complete()
    client.seek(P(5, 0))
    client.seek(P(5, 0))  # epoch 2 on the client, never sent
    d.remove_consumer("r")
    consumer = d.add_consumer(client)  # reconnect: subscribe carries the client's epoch
    assert consumer.epoch.value == client.epoch == 2
    assert client.receive() is None  # old connection's messages are gone
    d.read_more().complete()
    got = client.receive_all()
    assert got and all(m.consumer_epoch == 2 for m in got)


def test_a_seek_whose_reset_fails_leaves_the_consumer_epoch_where_it_was() -> None:
    """The seek's epoch is adopted only together with its reset.  Adopted
    first and kept after a failed reset, messages from the old position would carry the new epoch
    and pass the client's filter."""
    d, client = _reader(cursor_checks=True)
    before = d.consumers["r"].epoch.value
    change = d.cursor.start_increase_epoch(lambda: P(5, 0))  # another change runs: the reset conflicts
    cmd = client.seek(P(5, 3))
    with pytest.raises(CursorEpochConflictError):
        d.handle_seek("r", cmd)
    assert d.consumers["r"].epoch.value == before, "the failed seek's epoch was kept"
    d.cursor.end_increase_epoch()
    assert change == 0
    assert d.handle_seek("r", cmd), "the same seek, retried once the change ended, is taken"
    assert d.consumers["r"].epoch.value == cmd.consumer_epoch


def test_a_connection_that_joins_during_a_read_gets_its_own_epoch_on_that_reads_messages() -> None:
    """A read captures each connection's epoch when it starts.  Keyed by
    consumer *name*, a consumer that reconnected with a higher epoch while the read was in flight
    got the old connection's epoch: its client dropped every message, the broker kept them
    pending for it, and they were never redelivered."""
    d, client = _reader(cursor_checks=True)
    d.add_consumer(ClientConsumer("other"))  # keeps the subscription connected across the reconnect
    read = d.read_more()
    assert read is not None
    client.seek(P(5, 0))  # the client's epoch moves on; the connection drops before the seek lands
    d.remove_consumer("r")
    d.add_consumer(client)  # reconnects with epoch 1
    read.complete()
    got = client.receive_all()
    stuck = d.consumers["r"].pending - {m.position for m in got}
    assert not client.dropped, f"the new connection's messages were dropped: {[m.position for m in client.dropped]}"
    assert not stuck, f"pending at the broker, never received: {sorted(stuck)}"
