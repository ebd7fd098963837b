"""The delete phase's storage I/O: gathering every fact a verdict rests on (:mod:`.gather`), carrying
out the deletes at the versions read (:mod:`.execute`), reading offloaded indexes
(:mod:`.offload_index`), claims on offloaded copies (:mod:`.offload_claims`), circuit breakers that
pause the work through an outage (:mod:`.breaker`) and what counts as a transient failure
(:mod:`.retry`).  Decisions are made in :mod:`deletion_service.delete_phase.rules`, never here.
"""
