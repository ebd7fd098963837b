"""The leak watcher: PIP-186's mark phase by observation, for brokers that delete in one phase.

A stock broker removes a ledger from its metadata, then asks BookKeeper or the offloader to delete
it; when that second step fails, nothing is left that names the ledger.  The watcher compares what
the metadata store referenced at one reading with what it references at the next: every ledger or
offloaded part that left every reference is a *departure*; one that still exists after a settle
delay (the broker's own delete normally finishes in seconds) is a leak, and gets one request with
reason ``leaked``.  The delete phase verifies that request as it verifies every other: the
watcher's judgement buys nothing.

Pure, here: :mod:`.sightings` (what one reading saw, by topic), :mod:`.departures` (what left every
reference between two readings, as the requests a leak of it needs) and :mod:`.settle` (departures
waiting out the settle delay, dropped when referenced again).
"""
