package sdk

import (
	"strconv"
	"strings"
)

// exitCode is a command's exit code by shell conventions: its own code when it exited,
// 128+N when signal N ended it. moat-init reports a signal only in the status text, as
// Go's os.ProcessState prints it ("signal: terminated", "signal: segmentation fault (core
// dumped)", "signal: 34"): the text comes from the sandbox, so anything unrecognised
// counts as SIGKILL (137), the commonest end of a process that did not exit.
func exitCode(code int32, exited bool, status string) int {
	if exited {
		return int(code)
	}
	name, ok := strings.CutPrefix(status, "signal: ")
	if !ok {
		return int(code)
	}
	if n, ok := signalNumber(strings.TrimSuffix(name, " (core dumped)")); ok {
		return 128 + n
	}
	return 128 + 9
}

// signalNumber is the number of the Linux signal Go names name (syscall.Signal.String on
// Linux, where moat-init runs), whatever the platform of this client.
func signalNumber(name string) (int, bool) {
	if n, ok := strings.CutPrefix(name, "signal "); ok {
		v, err := strconv.Atoi(n)
		return v, err == nil && v >= 1 && v <= 64
	}
	switch name {
	case "hangup":
		return 1, true
	case "interrupt":
		return 2, true
	case "quit":
		return 3, true
	case "illegal instruction":
		return 4, true
	case "trace/breakpoint trap":
		return 5, true
	case "aborted":
		return 6, true
	case "bus error":
		return 7, true
	case "floating point exception":
		return 8, true
	case "killed":
		return 9, true
	case "user defined signal 1":
		return 10, true
	case "segmentation fault":
		return 11, true
	case "user defined signal 2":
		return 12, true
	case "broken pipe":
		return 13, true
	case "alarm clock":
		return 14, true
	case "terminated":
		return 15, true
	case "stack fault":
		return 16, true
	case "child exited":
		return 17, true
	case "continued":
		return 18, true
	case "stopped (signal)":
		return 19, true
	case "stopped":
		return 20, true
	case "stopped (tty input)":
		return 21, true
	case "stopped (tty output)":
		return 22, true
	case "urgent I/O condition":
		return 23, true
	case "CPU time limit exceeded":
		return 24, true
	case "file size limit exceeded":
		return 25, true
	case "virtual timer expired":
		return 26, true
	case "profiling timer expired":
		return 27, true
	case "window changed":
		return 28, true
	case "I/O possible":
		return 29, true
	case "power failure":
		return 30, true
	case "bad system call":
		return 31, true
	}
	return 0, false
}
