// Package process holds the generated protobuf types of the envd "process"
// service (process/process.proto), wire-compatible with E2B's envd.
package process
