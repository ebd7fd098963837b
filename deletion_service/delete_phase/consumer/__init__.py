"""The delete-phase consumer, which owns every disposition of a received message: taking messages in
(:mod:`.intake`), the worker's batch loop (:mod:`.worker`), carrying each decided message out of our
hands in the lifecycle table's order (:mod:`.disposer`), the RETRY and DLQ copies it sends
(:mod:`.copies`), RETRY messages held until due (:mod:`.not_yet_due`), and redeliveries of settled
messages (:mod:`.settled_recently`).
"""
