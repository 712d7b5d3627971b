#!/bin/sh
# Rebuild the XDP object in a temporary directory and fail if it differs
# from the committed ebpf/steer.bpf.o (run in CI after installing clang and
# libbpf-dev). Exit status: 0 same, 1 different or build failed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
CLANG=${CLANG:-clang}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/build.sh" "$tmp/steer.bpf.o"
if cmp -s "$tmp/steer.bpf.o" "$here/steer.bpf.o"; then
	echo "ebpf/check.sh: steer.bpf.o matches its source ($("$CLANG" --version | head -n1))"
else
	echo "ebpf/check.sh: ebpf/steer.bpf.o differs from a fresh build of ebpf/steer.bpf.c." >&2
	echo "  Run ebpf/build.sh and commit ebpf/steer.bpf.o (and ebpf/CLANG_VERSION)." >&2
	have=$("$CLANG" --version | head -n1)
	want=$(cat "$here/CLANG_VERSION" 2>/dev/null || echo unknown)
	if [ "$have" != "$want" ]; then
		echo "  Note: the committed object was built with '$want'; this is '$have'." >&2
		echo "  Different clang versions emit different objects." >&2
	fi
	cmp "$tmp/steer.bpf.o" "$here/steer.bpf.o" >&2 || true
	exit 1
fi
