"""Which objects of an offloaded copy exist, from one listing per object stem (``offloaders/s3.py``),
against a listing in S3's key order: no server needed to count the calls."""

from __future__ import annotations

from collections.abc import Iterator

from offloaders.interface import ObjectHead, OffloadTarget, SegmentRef, StorageLocation
from offloaders.s3 import stat_by_stem

STORED = sorted(["u-ledger-5", "u-ledger-5-index", "u-ledger-50", "u-ledger-50-index",
                 "00000000-0000-0001-0000-000000000002", "00000000-0000-0001-0000-000000000002-index",
                 "00000000-0000-0001-0000-000000000002-ledger-9"])


class Listing:
    """A bucket holding :data:`STORED`, listed as S3 lists: by prefix, in key order, lazily."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.read: list[str] = []

    def __call__(self, where: StorageLocation, prefix: str = "") -> Iterator[ObjectHead]:
        self.calls.append(prefix)
        for key in STORED:
            if key.startswith(prefix):
                self.read.append(key)
                yield ObjectHead(key, len(key), {}, 1)


def test_one_listing_answers_a_part_and_names_sharing_its_stem_are_not_taken_for_it() -> None:
    listing = Listing()
    target = OffloadTarget("aws-s3", {"bucket": "b"}, 0, 0, 5, (SegmentRef(1, 2), SegmentRef(3, 4)))
    names = ["u-ledger-5", "u-ledger-5-index", "00000000-0000-0001-0000-000000000002",
             "00000000-0000-0001-0000-000000000002-index", "00000000-0000-0003-0000-000000000004",
             "00000000-0000-0003-0000-000000000004-index"]
    heads = stat_by_stem(listing, target, names)
    assert {n for n, h in heads.items() if h is not None} == set(names[:4])
    assert heads["u-ledger-5-index"] == ObjectHead("u-ledger-5-index", 16, {}, 1)
    assert len(listing.calls) == 3, "one listing per part"
    assert "u-ledger-50" not in listing.read, "the listing stops at the last name asked for"
    assert "00000000-0000-0001-0000-000000000002-ledger-9" not in listing.read
