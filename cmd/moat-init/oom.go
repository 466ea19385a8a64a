package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// oomCounter returns a reader of the sandbox's OOM-kill counter as the sandbox's cgroup
// namespace shows it under root (/sys/fs/cgroup): cgroup v1 memory/memory.oom_control, or
// v2 memory.events. It returns nil when neither has the counter (gVisor, whose OOM kills
// happen on the host and end the whole sandbox).
func oomCounter(root string) func() uint64 {
	for _, f := range []string{filepath.Join(root, "memory", "memory.oom_control"), filepath.Join(root, "memory.events")} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if _, ok := parseOOMKill(data); !ok {
			continue
		}
		return func() uint64 {
			data, err := os.ReadFile(f)
			if err != nil {
				return 0
			}
			n, _ := parseOOMKill(data)
			return n
		}
	}
	return nil
}

// parseOOMKill reads the "oom_kill N" line of a cgroup memory.oom_control or memory.events
// file; ok is false when there is none (or its number is not one).
func parseOOMKill(data []byte) (n uint64, ok bool) {
	for line := range bytes.Lines(data) {
		k, v, found := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if !found || string(k) != "oom_kill" {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
