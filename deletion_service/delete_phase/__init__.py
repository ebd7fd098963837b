"""The delete phase: every request verified against the metadata store and BookKeeper's own metadata
before anything is deleted.  Three layers, each its own package:

* :mod:`.rules` decides, with no I/O: the decision table, the lifecycle table, the verifiers;
* :mod:`.storage` reads and writes storage: gathering the facts, carrying out the deletes, claims,
  circuit breakers;
* :mod:`.consumer` owns every message: intake, disposition (ack, RETRY, DLQ), redeliveries.

:mod:`.pipeline` is the one spelling of gather → decide → delete → settle; :mod:`.offload` and
:mod:`.process` are the lanes that run it off the worker's thread (offloaded copies on threads,
BookKeeper requests in a child process).
"""
