"""The dead-letter queue: the reasons a request can be parked for (:mod:`.reasons`), the operator's
tools that list, purge and requeue parked requests (:mod:`.operations`), and the settlement markers
only this tool can write (:mod:`.marker`).  The DLQ copy a worker sends is built in
:mod:`deletion_service.delete_phase.consumer.copies`, beside the RETRY copy it mirrors.
"""
