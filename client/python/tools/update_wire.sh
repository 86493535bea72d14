#!/bin/sh
# Regenerates qdp/qdp.desc, the wire contract the package ships, from proto/qdp.proto: a binary
# FileDescriptorSet written by protoc (or protoc-c, which the daemon's build already needs; the
# two write the same set). Run it after every change to proto/qdp.proto and commit the result;
# tests/test_wire.py fails while the two differ.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
proto=$(cd "$here/../../proto" && pwd)
out="$here/qdp/qdp.desc"
if command -v protoc >/dev/null 2>&1; then
  compiler=protoc
elif command -v protoc-c >/dev/null 2>&1; then
  compiler=protoc-c
else
  echo "update_wire.sh: needs protoc or protoc-c (Debian: protobuf-c-compiler)" >&2
  exit 1
fi
"$compiler" --proto_path="$proto" --descriptor_set_out="$out.tmp" "$proto/qdp.proto"
mv "$out.tmp" "$out"
echo "wrote $out with $compiler" >&2
