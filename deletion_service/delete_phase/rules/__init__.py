"""What the delete phase decides, as pure functions and tables (no I/O module is imported here, and a
structure test keeps it so): the decision table over a request and its facts (:mod:`.decision`),
the life of one received message (:mod:`.lifecycle`), what each settled action means outside
(:mod:`.outward`), why a request waits (:mod:`.hold_reason`), and the verifiers of BookKeeper's
metadata (:mod:`.verify_ledger`) and of an offloaded copy's index (:mod:`.verify_offload`).
Pure, so every row is tested without servers.
"""
