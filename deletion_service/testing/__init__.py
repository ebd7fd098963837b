"""Helpers that build upstream-shaped state, for tests and the embedded demo.

Like ``kazoo.testing``, this ships with the package so the demo and other
projects' tests can use it, but nothing on the delete path imports it: the
daemon only reads what Pulsar wrote, and these write it.

:mod:`.offload_objects`: tiered-storage objects (offload indexes, filesystem
MapFiles and the metadata they embed) in upstream's byte layouts.
"""
