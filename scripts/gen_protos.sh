#!/usr/bin/env bash
# Regenerate metastore/formats/generated/*_pb2.py(i) from metastore/formats/proto/*.proto.
#
# Usage: scripts/gen_protos.sh [OUT_DIR]   (default: metastore/formats/generated)
#
# Uses the protoc bundled in grpcio-tools (python -m grpc_tools.protoc), so the
# output depends only on the installed grpcio-tools version; the gencode then
# requires a protobuf runtime at least as new as that protoc (see
# metastore/formats/generated/__init__.py).  tests/unit/formats/test_generated_code.py
# regenerates into a temp dir and compares with the committed files.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
proto_dir="$repo/metastore/formats/proto"
out_dir="${1:-$repo/metastore/formats/generated}"
python="${PYTHON:-python3}"

mkdir -p "$out_dir"
cd "$proto_dir"
"$python" -m grpc_tools.protoc -I . --python_out="$out_dir" --pyi_out="$out_dir" ./*.proto

# protoc writes absolute imports ("import x_pb2") for cross-file references;
# make them package-relative so the package imports from anywhere.
for f in "$out_dir"/*_pb2.py; do
  sed -i -E 's/^import ([A-Za-z0-9_]+_pb2) as /from . import \1 as /' "$f"
done
