#!/usr/bin/env bash
# The lint gate `make test` runs: formatting, vet, staticcheck, dead code, and generated code
# that matches its generator. Tools are pinned and installed into bin/tools by `make lint`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=${TOOLS:-bin/tools}
fail=0

unformatted=$(git ls-files -z '*.go' | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
	echo "lint: not gofmt-formatted:" >&2; echo "$unformatted" >&2; fail=1
fi

go vet ./... || fail=1
"$tools/staticcheck" ./... || fail=1

# Functions no program or test reaches. deadcode prints nothing when there are none.
dead=$("$tools/deadcode" -test ./...)
if [ -n "$dead" ]; then
	echo "lint: unreachable code:" >&2; echo "$dead" >&2; fail=1
fi

# Generated code must be what api/generate.sh makes from the protos today.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
PATH="$PWD/$tools:$PATH" api/generate.sh "$tmp" >/dev/null
if ! diff -r -x '*.proto' -x doc.go "$tmp/api/envd" api/envd >"$tmp/diff"; then
	echo "lint: api/envd does not match api/generate.sh (run it and commit):" >&2
	head -40 "$tmp/diff" >&2; fail=1
fi

exit $fail
