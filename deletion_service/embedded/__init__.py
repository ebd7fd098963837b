"""The embedded mode: the pulsar-lite broker the daemon starts and supervises (:mod:`.broker`,
:mod:`.supervisor`) and the locks that keep one daemon per data dir (:mod:`.lock`, :mod:`.db_lock`).
"""
