package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/sdk"
)

// socketPath is the daemon socket this invocation talks to, and whether the user chose it
// (--socket or MOAT_SOCKET) rather than taking the default, moat.sock in --run-dir.
func (a *app) socketPath() (path string, chosen bool) {
	if a.socket != "" {
		return a.socket, true
	}
	if env := os.Getenv("MOAT_SOCKET"); env != "" {
		return env, true
	}
	return filepath.Join(a.runDir, "moat.sock"), false
}

// daemonOnlyFlagsSet says whether a flag that configures a daemon (not a request) was
// given: such flags cannot reach a daemon that already runs.
func (a *app) daemonOnlyFlagsSet() bool {
	return a.egressHosts != "" || a.egressDNS != "" || a.egressCA != "" || a.defaultDisk != "" || len(a.gitProtected) > 0 || a.tiersFile != ""
}

// startHint says how to get a daemon; every command but `run` ends with it when none
// answers.
const startHint = "start one with `sudo moat serve` (or install it as a systemd service: `sudo moat serve --install`), or point --socket / MOAT_SOCKET at a running daemon"

// connect returns a client of the running daemon. It never starts one: without a daemon
// it fails saying how to start one; on a socket this user may not open it says so.
func (a *app) connect(ctx context.Context) (*sdk.Client, error) {
	c, err := a.reach(ctx)
	if errors.Is(err, sdk.ErrNoDaemon) {
		sock, _ := a.socketPath()
		return nil, fmt.Errorf("no moat daemon at %s: %s", sock, startHint)
	}
	return c, err
}

// reach pings the daemon at the socket. Its errors: sdk.ErrNoDaemon when nothing
// listens, a permission error (wrapping sdk.ErrDaemonAccess) written for the user, or
// the refusal of daemon-only flags.
func (a *app) reach(ctx context.Context) (*sdk.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	if host := a.hostURL(); host != "" {
		return a.reachRemote(ctx, host)
	}
	sock, _ := a.socketPath()
	c := sdk.NewUnix(sock)
	err := c.Ping(ctx)
	switch {
	case err == nil:
		if a.daemonOnlyFlagsSet() {
			return nil, fmt.Errorf("--egress-hosts, --egress-dns, --egress-ca, --git-protected, --default-disk and --tiers configure a daemon: a daemon already runs at %s, give them to its `moat serve`", sock)
		}
		a.client = c
		return c, nil
	case errors.Is(err, sdk.ErrDaemonAccess):
		return nil, fmt.Errorf("%w %s: this user (uid %d) may not use it; the daemon's socket is root's: run moat as root (sudo)", sdk.ErrDaemonAccess, sock, os.Geteuid())
	case errors.Is(err, sdk.ErrNoDaemon):
		return nil, err
	default:
		return nil, fmt.Errorf("daemon at %s: %w", sock, err)
	}
}

// connectOrStart is connect for `moat run`, the one command that may start an in-process
// daemon: only when no daemon answers at the default socket, the user named no socket
// (--socket, MOAT_SOCKET: they meant that daemon) and this process is root. The
// in-process daemon shares the data directory with other in-process ones but not with a
// `moat serve` (daemon.Config.Exclusive), and ends with this command.
func (a *app) connectOrStart(ctx context.Context) (*sdk.Client, error) {
	c, err := a.reach(ctx)
	if !errors.Is(err, sdk.ErrNoDaemon) || a.hostURL() != "" {
		return c, err
	}
	sock, chosen := a.socketPath()
	if chosen {
		return nil, fmt.Errorf("no moat daemon at %s (the socket given by --socket or MOAT_SOCKET); start it with `sudo moat serve --socket %s`, or leave --socket and MOAT_SOCKET unset to let `moat run` start a daemon of its own", sock, sock)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("no moat daemon at %s, and running one in-process needs root: %s", sock, startHint)
	}
	cfg, err := a.daemonConfig()
	if err != nil {
		return nil, err
	}
	cfg.Socket = filepath.Join(a.runDir, fmt.Sprintf("embedded-%d.sock", os.Getpid()))
	_, stop, err := daemon.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("starting in-process daemon: %w", err)
	}
	a.cleanup = stop
	a.client = sdk.NewUnix(cfg.Socket)
	a.inProcess = true
	return a.client, nil
}
