"""The daemon (``ledger-deletion run``): :mod:`.run` wires the delete phase, the admin API and the
embedded broker together and drives start, wait and stop; the delete-phase thread (:mod:`.loop`),
the chores between batches (:mod:`.periodic`, :mod:`.gauges`,
:mod:`.scope_refresh`), the periodic summary line (:mod:`.summary`) and ``--exit-when-idle``
(:mod:`.idle`) are its parts.  What the daemon decides about a request lives in
:mod:`deletion_service.delete_phase`, not here.
"""
