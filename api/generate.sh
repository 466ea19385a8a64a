#!/usr/bin/env bash
# Regenerates the Go code for the envd protos under api/envd. With an argument, writes the
# files under that directory instead (scripts/lint.sh compares them with the committed ones).
#
# Needs protoc (Debian: apt-get install -y protobuf-compiler) and the Go
# plugins, pinned to the versions in go.mod:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
set -euo pipefail

out=${1:-.}
cd "$(dirname "$0")/.."
export PATH="$PATH:$(go env GOPATH)/bin"

for tool in protoc protoc-gen-go protoc-gen-connect-go; do
	command -v "$tool" >/dev/null || { echo "generate.sh: $tool not found" >&2; exit 1; }
done

# -I api/envd keeps the file names E2B uses (process/process.proto, ...).
protoc \
	-I api/envd \
	--go_out="$out" --go_opt=module=github.com/moatdev/moat \
	--connect-go_out="$out" --connect-go_opt=module=github.com/moatdev/moat \
	process/process.proto filesystem/filesystem.proto
