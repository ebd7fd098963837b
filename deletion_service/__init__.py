"""ledger-deletion: Apache Pulsar ledgers deleted safely, with PIP-186's two-phase protocol.

The packages are the architecture: :mod:`.protocol` (the request both phases share),
:mod:`.mark_phase` (phase one), :mod:`.delete_phase` (phase two: rules, storage, consumer),
:mod:`.daemon` (``ledger-deletion run``), :mod:`.dlq`, :mod:`.audit`, :mod:`.cursor` (the cursor
core), :mod:`.orphans` (the Spark scan), :mod:`.admin` (the HTTP API), :mod:`.cli` and
:mod:`.embedded` (the embedded broker and its locks).  ``docs/design/layout.md`` says more.
"""
