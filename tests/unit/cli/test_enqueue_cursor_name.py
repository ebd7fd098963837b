"""``enqueue --cursor`` takes the subscription as pulsar-admin names it; a MANAGED_CURSOR request carries
the name Pulsar gives that subscription's cursor (and stamps on its ledgers): URL-encoded."""

from __future__ import annotations

import pytest

from deletion_service.cli.commands.mark import Component, _single_request

TOPIC = "persistent://t/ns/orders"


@pytest.mark.parametrize(("subscription", "cursor"), [("a b", "a+b"), ("a+b", "a%2Bb"), ("x/y", "x%2Fy"),
                                                      ("é", "%C3%A9"), ("plain-sub_1", "plain-sub_1")])
def test_a_cursor_ledger_request_names_the_cursor_as_pulsar_does(subscription: str, cursor: str) -> None:
    request = _single_request(TOPIC, 7, Component.MANAGED_CURSOR, subscription, None)
    assert request.cursor_name == cursor


def test_a_bucket_request_names_the_subscription_as_its_ledgers_are_stamped() -> None:
    request = _single_request(TOPIC, 7, Component.DELAYED_INDEX_BUCKET, "a b", None)
    assert request.cursor_name == "a b"
