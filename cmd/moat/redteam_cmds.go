package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/redteam"
	"github.com/moatdev/moat/sdk"
)

// redteamCmd is `moat redteam`: the boundary self-test (internal/redteam).
func (a *app) redteamCmd() *cobra.Command {
	var rt string
	var asJSON bool
	var only []string
	c := &cobra.Command{
		Use:   "redteam",
		Short: "Run escape and exfiltration probes in fresh sandboxes and check them at the receiver",
		Long: `moat redteam creates two sandboxes and runs a battery of escape and exfiltration probes in
them: host canary files, capabilities, seccomp, the uid map, devices and /proc, module
autoload, raw sockets, direct TCP/UDP/ICMP/IPv6 egress, DNS exfiltration, proxy parsing
tricks, the metadata address, the daemon socket and resource limits. Each is checked where
it would land: a canary file on the host, TCP/UDP/DNS sinks on 127.0.0.1 this command
starts, the host's module list. Nothing off this machine is contacted.

With no daemon running (and as root) it starts its own with the sinks pinned as an allowed
host, so the proxy probes run too; against a running daemon they are skipped.
Exits 1 when a probe fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := redteam.CheckNames(only); err != nil {
				return err
			}
			sinks, err := redteam.StartSinks()
			if err != nil {
				return err
			}
			defer sinks.Close()
			pinned := false
			c, err := a.reach(ctx)
			sock, chosen := a.socketPath()
			if errors.Is(err, sdk.ErrNoDaemon) && a.hostURL() == "" && !chosen && os.Geteuid() == 0 {
				c, err = a.startRedteamDaemon(ctx, sinks)
				pinned = err == nil
				sock = filepath.Join(a.runDir, fmt.Sprintf("embedded-%d.sock", os.Getpid()))
			} else if errors.Is(err, sdk.ErrNoDaemon) {
				return fmt.Errorf("no moat daemon at %s: %s", sock, startHint)
			}
			if err != nil {
				return err
			}
			rep, err := redteam.Run(ctx, c, sinks, redteam.Options{Runtime: rt, Pinned: pinned, Socket: sock, RunDir: a.runDir, Only: only,
				Progress: a.progress, Log: a.logger(os.Stderr)})
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(rep); err != nil {
					return err
				}
			} else {
				printRedteam(rep)
			}
			if rep.Failed > 0 {
				return exitError{1}
			}
			return nil
		},
	}
	c.Flags().StringVar(&rt, "runtime", "", "OCI runtime of the probe sandboxes: runc, crun or runsc (default: the daemon's)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	c.Flags().StringSliceVar(&only, "probe", nil, "run only these probes (repeatable; names as in the report)")
	return c
}

// startRedteamDaemon starts an in-process daemon whose egress proxy pins
// redteam.PinnedName to the TCP sink's address and resolves through the DNS sink.
func (a *app) startRedteamDaemon(ctx context.Context, sinks *redteam.Sinks) (*sdk.Client, error) {
	cfg, err := a.daemonConfig()
	if err != nil {
		return nil, err
	}
	if cfg.EgressHosts == nil {
		cfg.EgressHosts = egress.Hosts{}
	}
	for _, n := range redteam.PinnedNames() {
		cfg.EgressHosts[n] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	cfg.EgressDNS = sinks.DNSAddr()
	cfg.Socket = filepath.Join(a.runDir, fmt.Sprintf("embedded-%d.sock", os.Getpid()))
	a.progress("no daemon running: starting one in this process for the probes")
	_, stop, err := daemon.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("starting in-process daemon: %w", err)
	}
	a.cleanup = stop
	a.client = sdk.NewUnix(cfg.Socket)
	a.inProcess = true
	return a.client, nil
}

func printRedteam(rep *redteam.Report) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROBE\tRESULT\tREASON")
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Name, r.Status, termSafe(r.Reason))
	}
	_ = w.Flush()
	fmt.Printf("%s: %d passed, %d failed, %d skipped in %.1fs\n", rep.Runtime, rep.Passed, rep.Failed, rep.Skipped, rep.Seconds)
}
