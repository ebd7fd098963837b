"""The audit trail: one hash-chained JSON record per settled deletion request.

"Who deleted ledger 4711, when, and on what evidence?" must be answerable months
later, and the answer must be trustworthy.  So every settled request appends one
record to ``<data-dir>/audit/audit-<n>.jsonl`` (``writer.py``), each carrying the
SHA-256 of the line before it (``record.py``), and ``verify.py`` walks the chain
to find an edited, removed, reordered or truncated record.  ``trail.py`` knows the
files; ``reader.py`` selects records for ``ledger-deletion audit``;
``publish.py`` copies records to ``<topic>-AUDIT`` when configured.
"""
