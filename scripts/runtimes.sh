#!/usr/bin/env bash
# Builds moat's pinned OCI runtimes from the Go module proxy into moat's own directory
# (default /usr/local/lib/moat), where moat prefers them over the system's (Debian 12 ships
# runc 1.1.5, without the 2025 fixes, and a runsc from 2022-12 with only the ptrace platform).
# `go install` checks each module against the Go checksum database, so a version below is
# one exact source tree. A runtime whose stamp file names its pinned version is not rebuilt.
#
# usage: scripts/runtimes.sh [DIR]
set -euo pipefail

RUNC_VERSION=v1.5.3
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237 # gVisor's Go branch of 2026-09-05

dir=${1:-${MOAT_RUNTIME_DIR:-/usr/local/lib/moat}}
GO=${GO:-go}
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

current() { [ -x "$dir/$1" ] && [ "$(cat "$dir/$1.version" 2>/dev/null)" = "$2" ]; }

# runc: cgo with libseccomp (Debian's libseccomp-dev), as runc's own releases are built.
if ! current runc "$RUNC_VERSION"; then
	echo "building runc $RUNC_VERSION (about 30 s)" >&2
	CGO_ENABLED=1 GOBIN="$work" "$GO" install -tags seccomp \
		-ldflags "-X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@$RUNC_VERSION"
	out=$("$work/runc" --version)
	grep -q "^runc version ${RUNC_VERSION#v}$" <<<"$out" || { echo "runc: unexpected version: $out" >&2; exit 1; }
	grep -q "^libseccomp: " <<<"$out" || { echo "runc was built without seccomp: $out" >&2; exit 1; }
	feat=$("$work/runc" features)
	grep -q '"enabled": true' <<<"$feat" || { echo "runc features: seccomp not enabled" >&2; exit 1; }
	install -m 0755 "$work/runc" "$dir/runc.new" && mv "$dir/runc.new" "$dir/runc"
	echo "$RUNC_VERSION" >"$dir/runc.version"
fi

# runsc: pure Go; the version string is the module's pseudo-version.
if ! current runsc "$RUNSC_VERSION"; then
	echo "building runsc $RUNSC_VERSION (about 3 minutes)" >&2
	CGO_ENABLED=0 GOBIN="$work" "$GO" install \
		-ldflags "-X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
	out=$("$work/runsc" --version)
	grep -q "^runsc version $RUNSC_VERSION$" <<<"$out" || { echo "runsc: unexpected version: $out" >&2; exit 1; }
	flags=$("$work/runsc" flags 2>&1)
	grep -q -- '-platform string' <<<"$flags" || { echo "runsc: no --platform flag" >&2; exit 1; }
	install -m 0755 "$work/runsc" "$dir/runsc.new" && mv "$dir/runsc.new" "$dir/runsc"
	echo "$RUNSC_VERSION" >"$dir/runsc.version"
fi
