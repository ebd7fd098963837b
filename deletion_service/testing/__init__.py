"""Test support that ships with the package: builders of upstream-shaped state, and checks of the cursor model.

Like ``kazoo.testing``, this ships with the package so the demo and other
projects' tests can use it, but nothing on the delete path imports it: the
daemon only reads what Pulsar wrote, and these write it.

:mod:`.offload_objects`: tiered-storage objects (offload indexes, filesystem
MapFiles and the metadata they embed) in upstream's byte layouts.

:mod:`.cursor_invariants`: what "correct" means for the cursor core's dispatcher
model (in order, nothing stuck, Key_Shared consistent), for scenario replays and
property tests.
"""
