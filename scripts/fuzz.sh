#!/usr/bin/env bash
# make fuzz: runs every fuzz target for FUZZTIME (default 20s). Seeds live in each package's
# testdata/fuzz/<Target>; new failing inputs are written there by `go test`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
t=${FUZZTIME:-20s}
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
  pkg=./$(dirname "${f#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
    echo "== $pkg $target ($t)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" -fuzzminimizetime 2s "$pkg"
  done
done
