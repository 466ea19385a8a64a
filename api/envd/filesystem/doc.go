// Package filesystem holds the generated protobuf types of the envd
// "filesystem" service (filesystem/filesystem.proto), wire-compatible with
// E2B's envd.
package filesystem
