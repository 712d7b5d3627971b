#!/bin/sh
# Compile the XDP steering program into ebpf/steer.bpf.o (committed).
# Usage: ebpf/build.sh [OUTPUT]   (default: ebpf/steer.bpf.o)
# Needs clang and libbpf-dev (<bpf/bpf_helpers.h>). The output does not
# depend on the checkout path: the compile runs inside ebpf/ on relative
# names and every absolute prefix is mapped away, so ebpf/check.sh can
# compare a rebuild byte for byte with the committed object.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/steer.bpf.o"}
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
CLANG=${CLANG:-clang}
if ! command -v "$CLANG" >/dev/null 2>&1; then
	echo "ebpf/build.sh: '$CLANG' not found; install clang and libbpf-dev (apt-get install -y clang libbpf-dev)" >&2
	exit 1
fi
cd "$here"
"$CLANG" -O2 -g -target bpf \
	-I"/usr/include/$(uname -m)-linux-gnu" \
	-ffile-prefix-map="$here"=. -fdebug-prefix-map="$here"=. \
	-Wall -Werror \
	-c steer.bpf.c -o "$out"
# Record the compiler next to the committed object (check.sh reports it).
if [ "$out" = "$here/steer.bpf.o" ]; then
	"$CLANG" --version | head -n1 >"$here/CLANG_VERSION"
fi
