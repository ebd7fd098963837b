"""Generated protobuf modules: do not edit; run ``scripts/gen_protos.sh``.

Produced by the protoc bundled with grpcio-tools 1.85.1 (libprotoc 35.1), so
each module starts with ``ValidateProtobufRuntimeVersion(PUBLIC, 7, 35, 1)``:
importing it needs the **protobuf runtime >= 7.35.1** (and < 8, where it only
warns).  An older runtime fails at import with "Runtime version cannot be
older than the linked gencode version" -- hence ``protobuf>=7.35.1`` in the
project's dependencies.  Regenerating with another grpcio-tools moves that
floor; ``tests/unit/formats/test_generated_code.py`` catches a drift between the
committed files and what the installed generator produces.

Only :mod:`metastore.formats` should import these; everyone else uses its
dataclasses.
"""
