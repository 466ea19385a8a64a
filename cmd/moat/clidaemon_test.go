package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// testDaemonFlags configure every daemon of a CLI test, `moat serve` and in-process:
// drives are allocated in full, so tests that run at the same time keep to 1 GiB each.
var testDaemonFlags = []string{"--default-disk", "1G"}

// daemonOnly says whether flag is a global flag that configures a daemon, which a
// command must not give once a daemon runs (it goes to its `moat serve`); each takes a
// value.
func daemonOnly(flag string) bool {
	switch flag {
	case "--egress-hosts", "--egress-dns", "--egress-ca", "--git-protected", "--default-disk", "--listen", "--runtime-path", "--tiers":
		return true
	}
	return false
}

// cliDaemon is a test's `moat serve`.
type cliDaemon struct {
	cmd    *exec.Cmd
	args   []string // c.args it was started with
	socket string
	stderr *testutil.SyncBuffer
	done   chan error
}

// argv is the command line of `moat args...`: a `run` while no daemon was started gets
// the daemon flags for its in-process daemon; any other command gets a running `moat
// serve` (started, or restarted when c.args changed) and c.args without daemon flags.
func (c *cli) argv(args ...string) []string {
	c.t.Helper()
	if c.external {
		return append(slices.Clone(c.args), args...)
	}
	if c.daemon == nil && len(args) > 0 && args[0] == "run" {
		return append(append(append([]string{}, c.args...), testDaemonFlags...), args...)
	}
	c.ensureDaemon()
	return append(clientArgs(c.args), args...)
}

// clientArgs is args without the daemon-only flags.
func clientArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if daemonOnly(args[i]) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// ensureDaemon starts the test's `moat serve` (with c.args and testDaemonFlags, no warm
// pools) unless one runs with the current c.args; a daemon started with other args is
// stopped first, keeping the data directory and its sandboxes.
func (c *cli) ensureDaemon() {
	c.t.Helper()
	if c.daemon != nil && slices.Equal(c.daemon.args, c.args) {
		return
	}
	c.stopDaemon()
	d := &cliDaemon{args: slices.Clone(c.args), stderr: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	argv := append(append(append([]string{}, c.args...), testDaemonFlags...), "serve", "--warm", "0")
	d.cmd = exec.Command(c.bin, argv...)
	d.cmd.Stdout, d.cmd.Stderr = d.stderr, d.stderr
	// A test binary killed (go test -timeout) takes its daemon with it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		c.t.Fatalf("starting moat serve: %v", err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	d.socket = filepath.Join(flagValue(c.args, "--run-dir"), "moat.sock")
	client := sdk.NewUnix(d.socket)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := client.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case err := <-d.done:
			c.t.Fatalf("moat serve ended: %v\n%s", err, d.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = d.cmd.Process.Kill()
			c.t.Fatalf("moat serve not ready after 2 min:\n%s", d.stderr.String())
		}
	}
	c.daemon = d
}

// stopDaemon ends the test's `moat serve` (SIGTERM, then SIGKILL after a minute). At the
// test's end (final) its sandboxes are deleted first: they would outlive the daemon.
func (c *cli) stopDaemon() { c.stopDaemonFinal(false) }

func (c *cli) stopDaemonFinal(final bool) {
	d := c.daemon
	if d == nil {
		return
	}
	if final {
		cl := sdk.NewUnix(d.socket)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if list, err := cl.List(ctx); err == nil {
			for _, sb := range list {
				_ = cl.Delete(ctx, sb.ID)
			}
			for len(list) > 0 && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
				list, _ = cl.List(ctx)
			}
		}
		cancel()
	}
	c.daemon = nil
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.done
		c.t.Errorf("moat serve did not stop on SIGTERM:\n%s", d.stderr.String())
	}
}

func flagValue(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}
