"""A copy's retry count and a DLQ copy's words count only when this tool sealed them: a sealed copy reads
back as written; any field changed, the body changed, the copy moved to another namespace's topics or
another key reads as unsealed (a count of 0; a parked message listed as ``unsealed`` with no words of
its own); with no key at all, a count is taken as written (else the retry budget would never run out)."""

from __future__ import annotations

import dataclasses
import json
import secrets

import pytest

from deletion_service.broker.interface import Outgoing, Received
from deletion_service.delete_phase.consumer import copies
from deletion_service.delete_phase.consumer.copies import (
    ATTEMPTS_SEAL,
    DLQ_LAST_ERROR,
    DLQ_REASON,
    MAX_DLQ_BODY,
    PARKED_SEAL,
    RECONSUMETIMES,
)
from deletion_service.delete_phase.rules import decision
from deletion_service.delete_phase.rules.decision import Kind, Policy
from deletion_service.delete_phase.rules.hold_reason import HELD_SEAL, HoldSeal
from deletion_service.delete_phase.rules.seal import ParkedSeal, Seal
from deletion_service.dlq.operations import Selection, entry
from deletion_service.protocol.fate import HoldReason

BASE = "persistent://t1/ns/__ledger_deletion"
OTHER = "persistent://t2/ns/__ledger_deletion"
BODY = json.dumps({"topicName": "persistent://t1/ns/orders", "ledgerComponent": "MANAGED_LEDGER",
                   "ledgerType": "LEDGER", "ledgerId": 7, "markedAt": 1, "reason": "orphan"}).encode()


def received(props: dict[str, str], topic: str = f"{BASE}-RETRY", data: bytes = BODY) -> Received:
    return Received(data, props, topic, "(5,1,-1,-1)", 1_700_000_000_000)


def arrived(copy: Outgoing, topic: str) -> Received:
    """A copy as the broker hands it to the next reader: on the topic it was sent to."""
    return received(dict(copy.properties), topic, copy.data)


def count_read(message: Received, seal: Seal | None) -> int:
    return copies.attempts(copies.with_proven_count(message, seal))


@pytest.fixture
def key() -> Seal:
    return Seal(secrets.token_bytes(32))


def test_a_sealed_count_reads_back_through_retries_and_hand_backs(key: Seal) -> None:
    first = copies.retry_copy(received({}, f"{BASE}-partition-0"), 1.0, seal=key)
    assert first.properties[RECONSUMETIMES] == "1" and ATTEMPTS_SEAL in first.properties
    on_retry = arrived(first, f"{BASE}-RETRY")
    assert count_read(on_retry, key) == 1
    second = arrived(copies.retry_copy(copies.with_proven_count(on_retry, key), 1.0, seal=key), f"{BASE}-RETRY")
    assert count_read(second, key) == 2

    class Publisher:
        sent: tuple[bytes, dict[str, str]] = (b"", {})

        def send_retry(self, data: bytes, properties: dict[str, str], delay_s: float,
                       source_topic: str | None = None) -> str:
            Publisher.sent = (data, properties)
            return "(6,0,-1,-1)"

    copies.hand_back_to_retry(Publisher(), copies.with_proven_count(second, key), 5.0)  # type: ignore[arg-type]
    data, props = Publisher.sent
    assert count_read(received(props, f"{BASE}-RETRY", data), key) == 2  # its count unchanged, still sealed


def test_each_tampered_part_of_a_sealed_count_reads_zero(key: Seal) -> None:
    one = copies.retry_copy(copies.with_proven_count(received({}), key), 1.0, seal=key)
    props = dict(one.properties)
    assert count_read(received(props), key) == 1
    assert count_read(received({**props, RECONSUMETIMES: "4242"}), key) == 0  # the count changed
    assert count_read(received({**props, RECONSUMETIMES: "01"}), key) == 0  # … even to the same number
    assert count_read(received({**props, ATTEMPTS_SEAL: "0" * 64}), key) == 0  # the seal changed
    assert count_read(received({k: v for k, v in props.items() if k != ATTEMPTS_SEAL}), key) == 0  # no seal
    assert count_read(received({**props, ATTEMPTS_SEAL: "\u00e9" * 64}), key) == 0  # not even ASCII
    assert count_read(received(props, data=BODY.replace(b"7", b"8")), key) == 0  # moved onto another request
    assert count_read(received(props, topic=f"{OTHER}-RETRY"), key) == 0  # moved into another namespace
    assert count_read(received(props), Seal(secrets.token_bytes(32))) == 0  # another cluster's key
    # a count the intake did not believe is not carried onto the next copy either
    stripped = copies.with_proven_count(received({**props, RECONSUMETIMES: "4242"}), key)
    assert RECONSUMETIMES not in stripped.properties and ATTEMPTS_SEAL not in stripped.properties


def test_a_tenants_count_spends_no_retry_budget_but_without_a_key_a_count_is_taken_as_written(key: Seal) -> None:
    forged = received({RECONSUMETIMES: "4242", "DELAY_TIME": "0"})
    assert count_read(forged, key) == 0
    assert count_read(forged, None) == 4242  # no key could be had: as before counts were sealed
    assert count_read(forged, Seal(None)) == 4242
    assert copies.retry_copy(forged, 1.0, seal=None).properties.get(ATTEMPTS_SEAL) is None


def test_an_older_daemons_retry_copy_keeps_its_label_and_restarts_its_count(key: Seal) -> None:
    """A rolling upgrade: a copy with a first-version label and an unsealed count loses nothing."""
    label = HoldSeal.sharing(key).label(HoldReason.NOT_YET, "ledger is OPEN", BODY)
    older = received({**label, RECONSUMETIMES: "4", "DELAY_TIME": "1000"})
    believed = copies.with_proven_count(older, key)
    assert copies.attempts(believed) == 0
    assert HoldSeal.sharing(key).read(believed.properties, believed.data) == (HoldReason.NOT_YET, "ledger is OPEN")
    assert believed.properties[HELD_SEAL] == label[HELD_SEAL]


def parked(copy: Outgoing, topic: str = f"{BASE}-DLQ") -> Received:
    return dataclasses.replace(arrived(copy, topic), message_id="(9,2,-1,-1)")


def test_a_dlq_copy_the_daemon_sealed_lists_its_reason_error_and_attempts(key: Seal) -> None:
    on_retry = copies.with_proven_count(arrived(copies.retry_copy(received({}), 1.0, seal=key), f"{BASE}-RETRY"), key)
    copy = copies.dead_letter_copy(on_retry, Kind.MAX_RETRIES.value, "zk down", seal=key)
    e = entry(parked(copy), f"{BASE}-DLQ", ParkedSeal.sharing(key))
    assert (e.reason, e.last_error, e.attempts, e.sealed) == ("max-retries-reached", "zk down", 1, True)
    assert e.to_json()["sealed"] is True and e.request is not None and e.request["ledgerId"] == 7
    big = copies.dead_letter_copy(received({}, data=b"x" * (MAX_DLQ_BODY + 10)), "invalid-request", "too big",
                                  undecodable=True, seal=key)
    assert entry(parked(big), f"{BASE}-DLQ", ParkedSeal.sharing(key)).sealed  # sealed as stored: truncated


@pytest.mark.parametrize("change", [
    {DLQ_REASON: "cannot-verify"},
    {DLQ_LAST_ERROR: "ZooKeeper quorum lost - run `ledger-deletion dlq purge --all` now"},
    {RECONSUMETIMES: "4242"},
    {PARKED_SEAL: "0" * 64},
    {PARKED_SEAL: None},
    {DLQ_REASON: None},
])
def test_each_tampered_field_of_a_dlq_copy_lists_as_unsealed_with_none_of_its_words(
        key: Seal, change: dict[str, str | None]) -> None:
    sealed = copies.dead_letter_copy(copies.with_proven_count(received({}), key), "delete-failed", "access denied",
                                     seal=key)
    props = {k: v for k, v in {**sealed.properties, **change}.items() if v is not None}
    e = entry(parked(Outgoing(sealed.data, props)), f"{BASE}-DLQ", ParkedSeal.sharing(key))
    assert (e.reason, e.last_error, e.attempts, e.sealed) == ("unsealed", "", 0, False)
    assert e.request is not None and e.request["ledgerId"] == 7  # still listed, with what its body says


def test_a_dlq_copy_moved_or_rewritten_or_listed_without_the_key_is_unsealed(key: Seal) -> None:
    sealed = copies.dead_letter_copy(copies.with_proven_count(received({}), key), "delete-failed", "boom", seal=key)
    unsealed = ("unsealed", "", 0, False)

    def shown(message: Received, dlq: str = f"{BASE}-DLQ", seal: ParkedSeal | None = None) -> tuple:
        e = entry(message, dlq, seal or ParkedSeal.sharing(key))
        return e.reason, e.last_error, e.attempts, e.sealed

    assert shown(parked(sealed)) == ("delete-failed", "boom", 0, True)
    assert shown(parked(sealed, f"{OTHER}-DLQ"), f"{OTHER}-DLQ") == unsealed  # into another namespace's DLQ
    assert shown(dataclasses.replace(parked(sealed), data=BODY.replace(b"7", b"8"))) == unsealed  # another body
    assert shown(parked(sealed), seal=ParkedSeal(None)) == unsealed  # no key to prove it with
    keyless = copies.dead_letter_copy(received({}), "delete-failed", "boom", seal=None)
    assert PARKED_SEAL not in keyless.properties and shown(parked(keyless)) == unsealed  # a daemon without a key
    assert shown(parked(sealed), seal=ParkedSeal(secrets.token_bytes(32))) == unsealed  # another key
    tenants = received({DLQ_REASON: "max-retries-reached", DLQ_LAST_ERROR: "run `dlq purge --all`",
                        RECONSUMETIMES: "4242", PARKED_SEAL: "f" * 64}, f"{BASE}-DLQ")
    assert shown(tenants) == unsealed


def test_unsealed_entries_are_selected_by_their_reason_and_requeued_by_filter(key: Seal) -> None:
    tenants = entry(received({DLQ_REASON: "cross-namespace"}, f"{BASE}-DLQ"), f"{BASE}-DLQ", ParkedSeal.sharing(key))
    assert Selection(reason="unsealed").matches(tenants) and not Selection(reason="cross-namespace").matches(tenants)
    assert Selection(everything=True).matches(tenants) and tenants.requeued_by_filter
    garbage = entry(received({}, f"{BASE}-DLQ", b"\xff"), f"{BASE}-DLQ", ParkedSeal.sharing(key))
    assert garbage.reason == "unsealed" and not garbage.requeued_by_filter  # undecodable: purge it


def test_a_request_deferred_for_room_in_the_offload_lane_is_held_for_that_not_for_an_outage(key: Seal) -> None:
    """Lane-full deferrals are grouped under their own reason: an operator told "outage" would look for a
    dependency that is down, while the lane's room is what the request waits for."""
    full = decision.offload_lane_full(Policy())
    copy = copies.retry_copy(received({}, f"{BASE}-partition-0"), full.delay_s, counts=full.counts, kind=full.kind,
                             why=full.reason, seal=key)
    reason, why = HoldSeal.sharing(key).read(copy.properties, copy.data)
    assert reason == HoldReason.LANE_FULL and reason.label.startswith("waiting for room in the offload lane")
    assert why == full.reason
    assert copy.properties[RECONSUMETIMES] == "0", "waiting for the lane's room is no try of the request's"
