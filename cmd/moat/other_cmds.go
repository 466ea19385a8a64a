package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/bench"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/doctor"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/storage"
	"github.com/moatdev/moat/sdk"
)

// watchResize reports the terminal's size on every SIGWINCH until ctx ends.
func watchResize(ctx context.Context, fd int) <-chan sdk.TermSize {
	out := make(chan sdk.TermSize, 1)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
					select {
					case out <- sdk.TermSize{Cols: uint32(w), Rows: uint32(h)}:
					default:
					}
				}
			}
		}
	}()
	return out
}

func (a *app) templateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Manage templates (root filesystems for sandboxes)"}
	cmd.PersistentFlags().BoolVarP(&a.quietProgress, "quiet", "q", false, "print no progress lines while a template is built, imported or pulled (errors still)")
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List templates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Templates(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []v1.Template{}
				}
				return printJSON(list)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSOURCE\tLAYERS\tCREATED")
			for _, t := range list {
				created := "-"
				if !t.Created.IsZero() {
					created = t.Created.Local().Format("2006-01-02 15:04")
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", termSafe(t.Name), termSafe(t.Source), t.Layers, created)
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var mirror, dockerfile, contextDir, stepsFile string
	var buildJSON bool
	build := &cobra.Command{
		Use:   "build NAME [--file Dockerfile [--context DIR]]",
		Short: "Build a template: from a Dockerfile (--file), or the clean Debian bookworm template (`build debian`, debootstrap, takes minutes)",
		Long: `build NAME --file Dockerfile [--context DIR] builds template NAME from a Dockerfile:
FROM (a moat template, or an image reference such as docker.io/library/alpine:3.20, pulled
once as a template of its own), RUN (shell and exec form), COPY [--chown=USER[:GROUP]]
(sources inside --context), ENV, WORKDIR, USER and ARG; LABEL, CMD and ENTRYPOINT are
recorded (template ls --json), not run. Each step that changes files runs in a build
sandbox (package registries allowed, nothing else) and becomes a cached layer: a rebuild
reuses the layers of the unchanged steps before the first change. A second build of the
same name waits for the first.

build debian builds the clean Debian bookworm template with debootstrap.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if stepsFile != "" { // template_steps.go
				return a.buildStepsFile(cmd, args[0], stepsFile, dockerfile, contextDir, buildJSON)
			}
			if dockerfile != "" {
				if cmd.Flags().Changed("mirror") {
					return fmt.Errorf("--mirror is for build debian, not a Dockerfile build")
				}
				return a.buildDockerfile(cmd, args[0], dockerfile, contextDir, buildJSON)
			}
			if contextDir != "" || buildJSON {
				return fmt.Errorf("--context and --json need --file")
			}
			return a.templateOp(cmd.Context(), "build", v1.TemplateRequest{Name: args[0], Mirror: mirror})
		},
	}
	build.Flags().StringVar(&mirror, "mirror", "", "Debian mirror URL for build debian (default: the host's apt source)")
	build.Flags().StringVarP(&dockerfile, "file", "f", "", "Dockerfile to build NAME from")
	build.Flags().StringVar(&contextDir, "context", "", "build context: the directory COPY reads from (default: none)")
	build.Flags().BoolVar(&buildJSON, "json", false, "print the template and the build report as JSON (with --file)")
	build.Flags().StringVar(&stepsFile, "steps", "", "YAML file of E2B template builder steps to build NAME from (docs/e2b-templates.md)")

	var name string
	imp := &cobra.Command{
		Use:   "import FILE",
		Short: "Import a docker-archive or OCI-layout tar as a template",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := absPath(args[0])
			if err != nil {
				return err
			}
			if name == "" {
				return fmt.Errorf("--name is required")
			}
			return a.templateOp(cmd.Context(), "import", v1.TemplateRequest{Name: name, Path: path})
		},
	}
	imp.Flags().StringVar(&name, "name", "", "template name")

	var pullName string
	var insecure bool
	pull := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image from a registry as a template",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := pullName
			if n == "" {
				n = storage.ImageTemplateName(args[0])
			}
			return a.templateOp(cmd.Context(), "pull", v1.TemplateRequest{Name: n, Ref: args[0], Insecure: insecure})
		},
	}
	pull.Flags().StringVar(&pullName, "name", "", "template name (default: derived from REF)")
	pull.Flags().BoolVar(&insecure, "insecure", false, "plain-HTTP registry")
	cmd.AddCommand(ls, build, imp, pull, a.templateRmCmd())
	return cmd
}

func (a *app) templateOp(ctx context.Context, op string, req v1.TemplateRequest) error {
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	t, err := c.TemplateOp(ctx, op, req, a.progress)
	if err != nil {
		return err
	}
	fmt.Println(t.Name)
	return nil
}

func absPath(p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return wd + "/" + p, nil
}

func (a *app) doctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check runtimes and kernel features; say what would add isolation",
		Long:  "doctor exits 0 when at least one runtime works on this host.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var r doctor.Report
			c, err := a.reach(cmd.Context())
			switch {
			case errors.Is(err, sdk.ErrNoDaemon):
				// The doctor is most wanted when no daemon starts: check the host from here.
				r = doctor.Run(cmd.Context(), daemon.ProbeRuntime)
				sock, _ := a.socketPath()
				fmt.Fprintf(os.Stderr, "moat: no daemon at %s: checked this host without it (no storage checks)\n", sock)
			case err != nil:
				return err
			default:
				if err := c.Doctor(cmd.Context(), &r); err != nil {
					return err
				}
			}
			if asJSON {
				if err := printJSON(r); err != nil {
					return err
				}
			} else {
				printDoctor(r)
			}
			if !r.OK {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// benchHoldName is the name the bench's daemons pin to 127.0.0.1 for the connection-load
// figure's upstream.
const benchHoldName = "hold.bench.test"

type benchEnv struct {
	d      *daemon.Daemon
	client *sdk.Client
	socket string
	runDir string
	listen string // the TCP listener (E2B API), if any
}

// withPaths is base with over's runtimes' binaries replacing base's.
func withPaths(base, over map[string]string) map[string]string {
	if len(base)+len(over) == 0 {
		return nil
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, over)
	return out
}

// benchDaemon starts an in-process daemon with private state for `moat bench`.
func (a *app) benchDaemon(ctx context.Context, name string, warm map[string]int, idBase uint32, drivePool int64) (*benchEnv, func(), error) {
	return a.benchDaemonListen(ctx, name, warm, idBase, drivePool, "", nil)
}

// benchDaemonListen is benchDaemon with a TCP listener on listen (loopback) serving the
// E2B API, its "base" template mapped to the host template (a bench daemon's fresh data
// directory has no debian template; pools serve every template the same way). paths picks
// runtimes' binaries (daemon.Config.RuntimePaths) over the user's --runtime-path; neither:
// moat's choice.
func (a *app) benchDaemonListen(ctx context.Context, name string, warm map[string]int, idBase uint32, drivePool int64, listen string, paths map[string]string) (*benchEnv, func(), error) {
	paths = withPaths(a.runtimePaths.m, paths)
	if os.Geteuid() != 0 {
		return nil, nil, fmt.Errorf("moat bench runs its own daemons and needs root")
	}
	tag := fmt.Sprintf("bench-%s-%d", name, os.Getpid())
	data := filepath.Join(a.dataDir, tag)
	run := filepath.Join(filepath.Dir(a.runDir), "moat-"+tag)
	sock := filepath.Join(run, "moat.sock")
	var limits sandbox.Limits
	if a.defaultDisk != "" {
		n, err := parseSize(a.defaultDisk)
		if err != nil || n <= 0 {
			return nil, nil, fmt.Errorf("--default-disk %q: want a positive size, e.g. 4G", a.defaultDisk)
		}
		limits.DiskBytes = n
	}
	var e2bTemplates map[string]string
	if listen != "" {
		e2bTemplates = map[string]string{"base": "host"}
	}
	d, stopDaemon, err := daemon.Start(ctx, daemon.Config{DataDir: data, RunDir: run, Socket: sock, Warm: warm, IDBase: idBase, Log: a.logger(os.Stderr), DrivePool: drivePool,
		Listen: listen, E2BTemplates: e2bTemplates, DefaultLimits: limits, RuntimePaths: paths,
		// The upstream of the connection-load figure, a server of the bench on loopback.
		EgressHosts: egress.Hosts{benchHoldName: {netip.MustParseAddr("127.0.0.1")}},
		// Idle sandboxes frozen for 2 s, then stopped: the resume figures time both.
		IdleFreeze: bench.IdleFreeze})
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		stopDaemon()
		os.RemoveAll(data)
		os.RemoveAll(run)
	}
	return &benchEnv{d: d, client: sdk.NewUnix(sock), socket: sock, runDir: run, listen: listen}, stop, nil
}

func printDoctor(r doctor.Report) {
	mark := func(ok bool) string {
		if ok {
			return "ok  "
		}
		return "MISS"
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNTIMES")
	for _, rt := range r.Runtimes {
		line := fmt.Sprintf("  %s\t%s\t%s\t%s", mark(rt.Usable), rt.Name, rt.Version, rt.Isolation)
		if !rt.Usable {
			line += "\t" + rt.Problem
			if rt.Fix != "" {
				line += "  → " + rt.Fix
			}
		}
		fmt.Fprintln(tw, line)
		for _, l := range runtimeDetails(rt) {
			fmt.Fprintln(tw, "  \t\t"+l)
		}
	}
	checks := func(title string, cs []doctor.Check) {
		if len(cs) == 0 {
			return
		}
		fmt.Fprintln(tw, title)
		for _, k := range cs {
			line := fmt.Sprintf("  %s\t%s\t%s", mark(k.OK), k.Name, k.Detail)
			if !k.OK && k.Fix != "" {
				line += "  → " + k.Fix
			}
			fmt.Fprintln(tw, line)
		}
	}
	checks("KERNEL", append(r.Kernel, r.Tools...))
	checks("STORAGE", r.Storage)
	printDoctorKVM(tw, r.KVM) // inventory_cmds.go
	fmt.Fprintln(tw, "ISOLATION LEVELS")
	for _, l := range r.Isolation {
		line := fmt.Sprintf("  %s\t%s\t%s", mark(l.Available), l.Name, l.Detail)
		if !l.Available && l.Fix != "" {
			line += "  → " + l.Fix
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func (a *app) apikeyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "apikey", Aliases: []string{"key"}, Short: "Manage API keys for the daemon's TCP listener and the secrets they may bind"}
	var grants []string
	var createMax, setMax maxFlags
	var createJSON, createApprover, createAdmin bool
	var createOwner string
	create := &cobra.Command{
		Use:   "create [--owner NAME] [--admin] [--secrets NAME,...] [--max-cpus N] [--max-memory SIZE] [--max-pids N] [--max-disk SIZE]",
		Short: "Create an API key; prints the key alone on stdout (it is stored hashed)",
		Long: `create makes an API key for the daemon's TCP listener (--listen) and prints it. Its clients
may bind only the secrets it is granted, none by default: --secrets, or later
'moat apikey grant'. Each binding must also lie within the secret's scope.

--max-* bound the limits of the sandboxes its clients create (a create asking for more is
refused; defaults above them are lowered to them); 'moat apikey limit' changes them. Without
them, the daemon's maxima (moat serve --max-*) and the host's capacity apply, as they do to
every key.

--owner names the person or agent the key is for: its sandboxes show it as their owner
(moat ls). --admin lets the key see, use and manage every sandbox, as the operator does
(docs/owners.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			max, err := createMax.maxima(cmd, v1.KeyMaxima{})
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			k, err := c.CreateAPIKeyWith(cmd.Context(), v1.APIKeyRequest{Secrets: grants, Max: &max, Approver: createApprover, Owner: createOwner, Admin: createAdmin})
			if err != nil {
				return err
			}
			if createJSON {
				return printJSON(k)
			}
			fmt.Println(k.Key)
			return nil
		},
	}
	create.Flags().StringSliceVar(&grants, "secrets", nil, "secrets the key's clients may bind (comma-separated or repeated)")
	create.Flags().BoolVar(&createJSON, "json", false, "print the key's record as JSON (id, key, secrets, max)")
	create.Flags().BoolVar(&createApprover, "approver", false, "the key may decide approvals (moat approvals), except those it asked and those of sandboxes it owns: give it to a person or a chat bot, never to an agent")
	createMax.register(create, "the key's sandboxes")
	create.Flags().StringVar(&createOwner, "owner", "", "the `NAME` of the person or agent the key is for, shown as its sandboxes' owner (printable, at most 64 bytes)")
	create.Flags().BoolVar(&createAdmin, "admin", false, "the key may see, use and manage every sandbox, as the operator (not API keys, secrets or the audit log, which stay on the unix socket)")
	limit := &cobra.Command{
		Use:   "limit ID [--max-cpus N] [--max-memory SIZE] [--max-pids N] [--max-disk SIZE]",
		Short: "Change an API key's maxima of its sandboxes' limits (0: none of its own)",
		Long: `limit changes the maxima given; the others stay. Running sandboxes keep their limits; the
key's next creates are bounded by the new maxima.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, key, err := a.apiKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			max, err := setMax.maxima(cmd, key.Max)
			if err != nil {
				return err
			}
			k, err := c.SetAPIKeyMax(cmd.Context(), args[0], max)
			if err != nil {
				return err
			}
			fmt.Printf("%s: %s\n", k.ID, maximaText(k.Max))
			return nil
		},
	}
	setMax.register(limit, "the key's sandboxes")
	// change adds (or removes) names to a key's grants.
	change := func(add bool) func(cmd *cobra.Command, args []string) error {
		return func(cmd *cobra.Command, args []string) error {
			c, key, err := a.apiKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			names := key.Secrets
			for _, n := range args[1:] {
				names = slices.DeleteFunc(names, func(s string) bool { return s == n })
				if add {
					names = append(names, n)
				}
			}
			k, err := c.SetAPIKeySecrets(cmd.Context(), args[0], names)
			if err != nil {
				return err
			}
			fmt.Printf("%s may bind: %s\n", k.ID, grantText(k.Secrets))
			return nil
		}
	}
	grant := &cobra.Command{
		Use:   "grant ID SECRET...",
		Short: "Let an API key's clients bind these secrets (each within its scope)",
		Args:  cobra.MinimumNArgs(2),
		RunE:  change(true),
	}
	revoke := &cobra.Command{
		Use:   "revoke ID SECRET...",
		Short: "Take secrets from an API key's grants (running sandboxes keep their bindings)",
		Args:  cobra.MinimumNArgs(2),
		RunE:  change(false),
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List API keys: ids, creation times, the secrets they may bind and their maxima",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			keys, err := c.APIKeys(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if keys == nil {
					keys = []v1.APIKey{}
				}
				return printJSON(keys)
			}
			for _, k := range keys {
				line := fmt.Sprintf("%s\t%s\t%s\t%s", k.ID, k.Created.Local().Format("2006-01-02 15:04:05"), grantText(k.Secrets), maximaText(k.Max))
				if k.Approver {
					line += "\tapprover" // may decide approvals (approval_cmds.go)
				}
				line += keyOwnerText(k) // owner_cmds.go
				fmt.Println(line)
			}
			return nil
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	rm := &cobra.Command{
		Use:   "rm ID",
		Short: "Delete an API key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return c.DeleteAPIKey(cmd.Context(), args[0])
		},
	}
	cmd.AddCommand(create, grant, revoke, limit, ls, rm)
	return cmd
}

// grantText renders an API key's grants.
func grantText(names []string) string {
	if len(names) == 0 {
		return "no secrets"
	}
	return strings.Join(names, ",")
}

func (a *app) benchCmd() *cobra.Command {
	var o bench.Options
	var asJSON bool
	var warmN, snapRuns, snapMiB, ckptRuns int
	var burstWarm bool
	var runtimes, ckptRuntimes string
	var sf syscallFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure create→first output per runtime against the raw runtime, idle memory, burst rate",
		Long: `bench creates sandboxes through the API and measures, for each runtime, the time from
create to the first output of a command (p50/p99 over --runs), beside the raw runtime's own
create + first exec of the same root filesystem with moat's spec in the same run; then the
host memory taken per idle sandbox, the burst create rate, and the API latency (ls p50/p99)
with idle sandboxes beside the same with each of them holding its cap of connections to a
server on loopback (--conn-sandboxes). With --syscalls, also system-call-heavy commands (a
200 000-write dd loop, git status on 10 000 files, a python import) timed inside sandboxes
of runc, the runsc of 2022 and the current runsc (the runsc of every figure when it is
installed), with ratios to runc and the issue's targets. Needs root on the daemon's host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Two in-process daemons with their own state, so the figures do not depend on
			// what else runs here: one builds every sandbox (cold), one serves fitting
			// creates from a warm pool.
			if err := sf.validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			// runsc is the current build (syscall_bench_cmds.go) when it is installed.
			paths := withPaths(a.runtimePaths.m, sf.coldPaths())
			cold, stopCold, err := a.benchDaemonListen(ctx, "cold", nil, 0x80000000, 0, "", paths)
			if err != nil {
				return err
			}
			defer stopCold()
			c := cold.client
			if warmN > 0 {
				listen, err := freeLoopback()
				if err != nil {
					return err
				}
				warm, stopWarm, err := a.benchDaemonListen(ctx, "warm", map[string]int{"runc:host": warmN, "runsc:host": warmN}, 0x90000000, 0, listen, paths)
				if err != nil {
					return err
				}
				defer stopWarm()
				o.Warm = warm.client
				o.WarmRefill = time.Second
				o.WarmReady = func(rt string) bool {
					for _, p := range warm.d.Manager.PoolStats() {
						if p.Runtime == rt && p.Ready < p.Want {
							return false
						}
					}
					return true
				}
				key, err := warm.client.CreateAPIKey(ctx)
				if err != nil {
					return err
				}
				o.E2B = &bench.E2BTarget{URL: "http://" + listen, Key: key.Key, Template: "base", Runtime: "runc"}
			}
			o.RunDir = cold.runDir
			o.HoldName = benchHoldName
			o.Socket = cold.socket
			for _, rt := range strings.Split(runtimes, ",") {
				if rt != "" { // --runtimes "": no latency figures
					o.Runtimes = append(o.Runtimes, rt)
				}
			}
			o.RuntimeArgs = daemon.RuntimeArgs(cold.runDir, paths)
			o.Progress = func(s string) { fmt.Fprintln(os.Stderr, "bench:", s) }
			res, err := bench.Run(cmd.Context(), c, o)
			if err != nil {
				return err
			}
			if burstWarm && o.Burst > 0 {
				// A daemon whose runc pool is as large as the burst.
				o.Progress(fmt.Sprintf("burst: %d creates at once from a warm pool of %d", o.Burst, o.Burst))
				bw, stopBW, err := a.benchDaemon(ctx, "burst", map[string]int{"runc:host": o.Burst}, 0xb0000000, 0)
				if err != nil {
					return fmt.Errorf("warm burst figure: %w", err)
				}
				rate, err := bench.BurstWarm(ctx, bw.client, o.Burst, func() bool {
					for _, p := range bw.d.Manager.PoolStats() {
						if p.Ready < p.Want {
							return false
						}
					}
					return true
				})
				stopBW()
				if err != nil {
					return fmt.Errorf("warm burst figure: %w", err)
				}
				res.BurstWarmPerSecond = rate
			}
			if err := a.benchSyscalls(ctx, cold, paths, sf, res, o.Progress); err != nil {
				return err
			}
			if snapRuns > 0 || ckptRuns > 0 {
				// A third daemon whose drives live in an XFS pool (copy-free snapshots).
				snapEnv, stopSnap, err := a.benchDaemon(ctx, "snap", nil, 0xa0000000, 8<<30)
				if err != nil {
					return fmt.Errorf("snapshot figure: %w", err)
				}
				if snapRuns > 0 {
					sr, err := bench.Snapshots(ctx, snapEnv.client, "runc", snapRuns, snapMiB, int64(snapMiB+256)<<20, o.Progress)
					if err != nil {
						stopSnap()
						return fmt.Errorf("snapshot figure: %w", err)
					}
					res.Snapshots = sr
				}
				if err := benchCheckpoints(ctx, snapEnv.client, strings.Split(ckptRuntimes, ","), ckptRuns, res, o.Progress); err != nil {
					stopSnap()
					return err
				}
				stopSnap()
			}
			if asJSON {
				return printJSON(res)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUNTIME\tPATH\tp50\tp99\tRATIO p50 (to raw)\tRUNS")
			for _, r := range res.Runtimes {
				if r.Error != "" && r.Raw.N == 0 {
					fmt.Fprintf(tw, "%s\terror: %s\n", r.Runtime, termSafe(r.Error))
					continue
				}
				fmt.Fprintf(tw, "%s\traw runtime (create + first exec)\t%.1f ms\t%.1f ms\t1.00\t%d\n", r.Runtime, r.Raw.P50, r.Raw.P99, r.Raw.N)
				fmt.Fprintf(tw, "%s\tmoat API, cold create\t%.1f ms\t%.1f ms\t%.2f\t%d\n", r.Runtime, r.API.P50, r.API.P99, r.Ratio, r.API.N)
				if r.Warm != nil {
					fmt.Fprintf(tw, "%s\tmoat API, warm pool\t%.1f ms\t%.1f ms\t%.2f\t%d\n", r.Runtime, r.Warm.P50, r.Warm.P99, r.WarmRatio, r.Warm.N)
				}
				if r.Resume != nil {
					fmt.Fprintf(tw, "%s\texec after idle stop (resume)\t%.1f ms\t%.1f ms\t%s\t%d\n", r.Runtime, r.Resume.P50, r.Resume.P99, resumeRatios(r.Raw, *r.Resume, r.Warm, r.API), r.Resume.N)
				}
				if r.Thaw != nil {
					fmt.Fprintf(tw, "%s\texec after idle freeze (thaw)\t%.1f ms\t%.1f ms\t%s\t%d\n", r.Runtime, r.Thaw.P50, r.Thaw.P99, resumeRatios(r.Raw, *r.Thaw, r.Warm, r.API), r.Thaw.N)
				}
				if r.Error != "" { // a later figure (warm, resume) failed
					fmt.Fprintf(tw, "%s\terror: %s\n", r.Runtime, termSafe(r.Error))
				}
			}
			tw.Flush()
			printBenchBinaries(res.Runtimes)
			fmt.Printf("idle memory: %.2f MiB per sandbox (host used-memory delta, caches dropped, over %d idle runc sandboxes); %.2f MiB charged to each sandbox's cgroup; moat-init RSS %.0f KiB\n",
				res.IdleMiBPerSandbox, res.IdleN, res.IdleCgroupMiB, res.IdleInitRSSKiB)
			if l := res.E2BCreate; l != nil {
				fmt.Printf("E2B Sandbox.create() (POST /sandboxes, template %s, warm pool): p50 %.1f ms, p99 %.1f ms (%d runs)\n", res.E2BTemplate, l.P50, l.P99, l.N)
			}
			fmt.Printf("burst: %.1f creates/s (%d at once, cold)", res.BurstPerSecond, res.BurstN)
			if res.BurstWarmPerSecond > 0 {
				fmt.Printf("; %.1f creates/s from a warm pool as large as the burst", res.BurstWarmPerSecond)
			}
			fmt.Println()
			if sr := res.Snapshots; sr != nil {
				fmt.Printf("snapshot (%s, %s): p50 %.1f ms empty workspace, %.1f ms with %d MiB (ratio %.2f); fork ×1 (includes starting it): p50 %.1f ms empty, %.1f ms with %d MiB (ratio %.2f); cold create of the same sandbox p50 %.1f ms\n",
					sr.Runtime, sr.Method, sr.SnapEmpty.P50, sr.SnapFull.P50, sr.WorkspaceMiB, sr.SnapRatio,
					sr.ForkEmpty.P50, sr.ForkFull.P50, sr.WorkspaceMiB, sr.ForkRatio, sr.Create.P50)
				fmt.Printf("fork --lazy ×1 (made stopped): p50 %.1f ms empty, %.1f ms with %d MiB (ratio %.2f); its first exec (the start) p50 %.1f ms\n",
					sr.LazyEmpty.P50, sr.LazyFull.P50, sr.WorkspaceMiB, sr.LazyRatio, sr.LazyFirstUse.P50)
			}
			printBenchCheckpoints(res.Checkpoints)
			printBenchSyscalls(res.Syscalls)
			if f := res.Files; f != nil {
				fmt.Printf("cp of %d MiB (runc): in p50 %.0f ms, out p50 %.0f ms (out/in %.2f); runc exec moving the same bytes: in %.0f ms, out %.0f ms (cp/raw: in %.2f, out %.2f)\n",
					f.MiB, f.In.P50, f.Out.P50, f.OutToIn, f.RawIn.P50, f.RawOut.P50, f.InRaw, f.OutRaw)
			}
			if cl := res.ConnLoad; cl != nil {
				fmt.Printf("API latency: ls p50/p99 %.1f/%.1f ms idle, %.1f/%.1f ms with %d sandboxes at their connection caps (%d tried each, %d held, daemon %d fds); ratio p50 %.2f, p99 %.2f\n",
					cl.Idle.P50, cl.Idle.P99, cl.Loaded.P50, cl.Loaded.P99, cl.Sandboxes, cl.Attempted, cl.Held, cl.DaemonFDs, cl.RatioP50, cl.RatioP99)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&o.Runs, "runs", 30, "measured runs per runtime")
	cmd.Flags().StringVar(&runtimes, "runtimes", "runc,runsc", "runtimes to measure")
	cmd.Flags().IntVar(&o.Idle, "idle", 10, "idle sandboxes for the memory figure (0: skip)")
	cmd.Flags().IntVar(&o.Burst, "burst", 20, "sandboxes for the burst create figure (0: skip)")
	cmd.Flags().IntVar(&warmN, "warm", 2, "warm pool size of the second daemon (0: skip the warm figure)")
	cmd.Flags().BoolVar(&burstWarm, "burst-warm", true, "also time the burst against a daemon whose warm pool is as large as the burst")
	cmd.Flags().IntVar(&o.ConnSandboxes, "conn-sandboxes", 11, "sandboxes at their connection caps for the API latency figure (0: skip)")
	cmd.Flags().IntVar(&o.ConnsPerSandbox, "conns", 512, "connections each of them opens (the default per-sandbox cap)")
	cmd.Flags().IntVar(&o.LsRuns, "ls-runs", 1000, "ls calls timed idle and under the connection load")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&snapRuns, "snapshot-runs", 20, "snapshots and forks timed per workspace size, on a daemon with an 8 GiB drive pool (0: skip)")
	cmd.Flags().IntVar(&ckptRuns, "checkpoint-runs", 10, "checkpoints, restores and stop+starts timed per runtime, on the drive-pool daemon (0: skip)")
	cmd.Flags().StringVar(&ckptRuntimes, "checkpoint-runtimes", "runc,runsc", "runtimes of the checkpoint figure")
	cmd.Flags().IntVar(&snapMiB, "snapshot-workspace", 1024, "MiB written into the workspace for the full-workspace snapshot figure")
	cmd.Flags().IntVar(&o.FileRuns, "cp-runs", 10, "moat cp runs in and out of a runc sandbox, beside runc exec moving the same bytes (0: skip)")
	cmd.Flags().IntVar(&o.FileMiB, "cp-mib", 100, "MiB of the file the cp figure copies")
	sf.register(cmd)
	return cmd
}

// freeLoopback returns 127.0.0.1:PORT with a port that was free a moment ago.
func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// apiKey connects to the daemon and finds the API key id among its keys.
func (a *app) apiKey(ctx context.Context, id string) (*sdk.Client, v1.APIKey, error) {
	c, err := a.connect(ctx)
	if err != nil {
		return nil, v1.APIKey{}, err
	}
	keys, err := c.APIKeys(ctx)
	if err != nil {
		return nil, v1.APIKey{}, err
	}
	i := slices.IndexFunc(keys, func(k v1.APIKey) bool { return k.ID == id })
	if i < 0 {
		return nil, v1.APIKey{}, fmt.Errorf("API key %s: not found (moat apikey ls lists them)", id)
	}
	return c, keys[i], nil
}
