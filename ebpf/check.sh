#!/bin/sh
# Rebuild the XDP object in a temporary directory and fail if it differs
# from the committed ebpf/steer.bpf.o (run in CI after installing clang and
# libbpf-dev). Exit status: 0 same, 1 different or build failed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/build.sh" "$tmp/steer.bpf.o"
if cmp -s "$tmp/steer.bpf.o" "$here/steer.bpf.o"; then
	echo "ebpf/check.sh: steer.bpf.o matches its source ($(clang --version | head -n1))"
else
	echo "ebpf/check.sh: ebpf/steer.bpf.o differs from a fresh build of ebpf/steer.bpf.c." >&2
	echo "  Run ebpf/build.sh and commit ebpf/steer.bpf.o, or check the clang version" >&2
	echo "  (committed object was built with the clang named in ebpf/CLANG_VERSION)." >&2
	cmp "$tmp/steer.bpf.o" "$here/steer.bpf.o" >&2 || true
	exit 1
fi
