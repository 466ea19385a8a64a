// Command moat runs coding agents' tasks in disposable sandboxes. It reaches the moat
// daemon only through the Go SDK (sdk/); when no daemon runs, `moat run` alone starts one
// in-process (root only, see connect.go). `moat serve` is the daemon itself.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/sdk"
)

// exitError carries a command's exit code out of cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return "exit status " + strconv.Itoa(e.code) }

// app holds the global flags and the lazily connected client.
type app struct {
	socket string
	host   string // --host: a daemon's --listen URL (remote.go)
	// quietProgress: template operations print no progress lines (moat template --quiet).
	quietProgress bool
	dataDir       string
	runDir        string
	logLevel      string
	idBase        uint32
	// egressHosts and egressDNS configure the egress proxy of `serve` and of the
	// in-process daemon.
	egressHosts  string
	egressDNS    string
	egressCA     string
	gitProtected []string
	// defaultDisk is the drive size of sandboxes that do not ask (--default-disk).
	defaultDisk string
	// tiersFile is the operator's tiers file (--tiers; tier_cmds.go).
	tiersFile string
	// runtimePaths: --runtime-path (runtime_cmds.go).
	runtimePaths runtimePaths

	client  *sdk.Client
	cleanup func()
	// inProcess is set when `moat run` started a daemon in this process (connectOrStart).
	inProcess bool
}

func main() {
	a := &app{}
	root := a.rootCmd()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if a.cleanup != nil {
		a.cleanup()
	}
	var ee exitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case err != nil:
		// Errors may quote what a sandbox chose (paths, names, moat-init's messages).
		fmt.Fprintln(os.Stderr, "moat:", termSafe(oneLine(err.Error())))
		os.Exit(1)
	}
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "moat",
		Short:         "Self-hosted sandboxes for coding agents",
		SilenceUsage:  true,
		SilenceErrors: true,
		Long: `moat runs each agent task in a disposable sandbox on this Linux host: a real OCI
runtime (runc, crun or gVisor's runsc), its own user namespace and uid range, seccomp, cgroup
limits, an overlay root with no host mounts, and no network path out.`,
	}
	root.PersistentFlags().StringVar(&a.socket, "socket", "", "daemon socket (env MOAT_SOCKET; default: moat.sock in --run-dir, /run/moat/moat.sock)")
	root.PersistentFlags().StringVar(&a.dataDir, "data", envOr("MOAT_DATA", "/var/lib/moat"), "the daemon's data directory `DIR` (serve and the in-process daemon of run; env MOAT_DATA)")
	root.PersistentFlags().StringVar(&a.host, "host", "", "drive the daemon listening at this `URL` (its --listen, e.g. http://10.0.0.5:7070; env MOAT_HOST) with the API key in MOAT_API_KEY, instead of the local socket")
	root.PersistentFlags().StringVar(&a.runDir, "run-dir", envOr("MOAT_RUN_DIR", "/run/moat"), "runtime state directory (env MOAT_RUN_DIR)")
	root.PersistentFlags().Uint32Var(&a.idBase, "id-base", 0, "host uid of the first sandbox's root (tests running several daemons)")
	_ = root.PersistentFlags().MarkHidden("id-base")
	root.AddCommand(
		a.serveCmd(), a.runCmd(), a.createCmd(), a.execCmd(), a.lsCmd(), a.inspectCmd(), a.archiveCmd(),
		a.lifecycleCmd("stop", "Stop a sandbox's processes; its drive is kept"),
		a.lifecycleCmd("start", "Start a stopped sandbox again with its drive"),
		a.lifecycleCmd("pause", "Freeze a sandbox's processes in memory"),
		a.lifecycleCmd("resume", "Thaw a paused sandbox"),
		a.rmCmd(), a.pruneCmd(), a.statsCmd(), a.logsCmd(), a.usageCmd(), a.shellCmd(), a.cpCmd(), a.templateCmd(), a.doctorCmd(), a.benchCmd(),
		a.apikeyCmd(), a.secretCmd(), a.eventsCmd(), a.egressCmd(), a.policyCmd(),
		a.diffCmd(), a.exportCmd(), a.changesCmd(), a.changeCmd(), a.approvalsCmd(),
		a.snapshotCmd(), a.restoreCmd(), a.forkCmd(), a.checkpointCmd(),
		a.tierCmd(), a.inventoryCmd(), // inventory_cmds.go
		a.userCmd(),    // user_cmds.go
		a.auditCmd(),   // audit_cmds.go
		a.redteamCmd(), // redteam_cmds.go
		a.portCmd(),    // port_cmds.go
	)
	root.AddCommand(a.visibilityCmd()) // owner_cmds.go
	// The flags that configure a daemon appear only on the commands that start one.
	for _, c := range root.Commands() {
		switch c.Name() {
		case "serve", "run", "bench", "redteam":
			a.daemonFlags(c.Flags())
		}
	}
	strictGroups(root)
	return root
}

// daemonFlags are the flags that configure a daemon: `moat serve`, the in-process daemon
// of `moat run`, and the daemons of `moat bench`.
func (a *app) daemonFlags(fs *pflag.FlagSet) {
	fs.StringVar(&a.logLevel, "log-level", "warn", "daemon log level for the in-process daemon: debug, info, warn, error")
	fs.StringVar(&a.egressHosts, "egress-hosts", "", "hosts file (ADDRESS NAME...) the egress proxy uses before DNS; pinned addresses may be private or loopback (serve and the in-process daemon)")
	fs.StringVar(&a.egressDNS, "egress-dns", "", "upstream DNS server IP:PORT the egress proxy resolves names with (default: the host's resolver)")
	fs.StringVar(&a.defaultDisk, "default-disk", "", "drive size of sandboxes that do not give --disk, allocated in full on the data filesystem (serve and the in-process daemon; default 10G)")
	fs.StringArrayVar(&a.gitProtected, "git-protected", nil, "repository path glob (anchored, ** across directories) a sandbox's git push may not touch, besides .github/workflows/**, .gitlab-ci.yml, .circleci/**, CODEOWNERS and .moat/**; repeatable (serve and the in-process daemon)")
	fs.StringVar(&a.egressCA, "egress-ca", "", "PEM file of extra CA certificates the egress proxy trusts upstream when it injects credentials")
	a.runtimePathFlag(fs)
	fs.StringVar(&a.tiersFile, "tiers", "", "YAML or JSON `FILE` of consequence tiers that add to or replace the built-ins read, edit, integrate and operate (serve and the in-process daemon; see moat tier ls)")
}

// strictGroups makes each command that only groups others (moat template, moat archive, …)
// refuse an unknown subcommand with a suggestion and a non-zero exit, instead of printing
// its help and succeeding; alone, it prints its help.
func strictGroups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		strictGroups(sub)
	}
	if !c.HasParent() || !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.SuggestionsMinimumDistance = 2
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return fmt.Errorf("%s (see %s --help)", msg, cmd.CommandPath())
	}
}

// progress prints a progress line of a long operation on stderr, unless --quiet.
func (a *app) progress(msg string) {
	if !a.quietProgress {
		fmt.Fprintln(os.Stderr, termSafe(msg))
	}
}

// oneLine puts cobra's multi-line "unknown command … Did you mean this?" on one line.
func oneLine(msg string) string {
	msg = strings.TrimSpace(msg)
	msg = strings.Replace(msg, "\n\nDid you mean this?\n\t", "; did you mean ", 1)
	return strings.ReplaceAll(msg, "\n\t", " or ")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (a *app) logger(w *os.File) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(a.logLevel))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// daemonConfig is the configuration global flags give a daemon (serve or in-process).
func (a *app) daemonConfig() (daemon.Config, error) {
	sock, _ := a.socketPath()
	cfg := daemon.Config{DataDir: a.dataDir, RunDir: a.runDir, Socket: sock, IDBase: a.idBase, Log: a.logger(os.Stderr), EgressDNS: a.egressDNS, EgressCA: a.egressCA, GitProtected: a.gitProtected,
		RuntimePaths: a.runtimePaths.m}
	if a.defaultDisk != "" {
		n, err := parseSize(a.defaultDisk)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("--default-disk %q: want a positive size, e.g. 4G", a.defaultDisk)
		}
		cfg.DefaultLimits.DiskBytes = n
	}
	if a.egressDNS != "" {
		if _, err := netip.ParseAddrPort(a.egressDNS); err != nil {
			return cfg, fmt.Errorf("--egress-dns %q: want IP:PORT", a.egressDNS)
		}
	}
	if err := a.loadTiers(&cfg); err != nil {
		return cfg, err
	}
	if a.egressHosts != "" {
		data, err := os.ReadFile(a.egressHosts)
		if err != nil {
			return cfg, fmt.Errorf("--egress-hosts: %w", err)
		}
		if cfg.EgressHosts, err = egress.ParseHosts(data); err != nil {
			return cfg, fmt.Errorf("--egress-hosts %s: %w", a.egressHosts, err)
		}
	}
	return cfg, nil
}
