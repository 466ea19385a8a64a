package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/sdk"
)

// sandboxFlags are the flags shared by run and create.
type sandboxFlags struct {
	runtime, template, repo, user string
	env                           []string
	memory, disk, ioBps           string
	cpus                          float64
	pids, nofile, ioIops          int64
	timeout                       string
	policy                        policyFlags
	credentials, credHeaders      []string
	github                        githubFlags
	agentBranchPrefix             string
	gitHold                       bool
	lifecycle                     lifecycleFlags
	naming                        namingFlags
	files                         fileFlags    // --upload, --repo-dirty (files_cmds.go)
	tier                          string       // --tier (tier_cmds.go)
	users                         addUserFlags // --add-user (user_cmds.go)
	visibility                    string       // --visibility (owner_cmds.go)
}

// githubFlags bind a GitHub App key (moat secret set --github-app) with a task's scope.
type githubFlags struct {
	token        string
	repos, perms []string
}

func (f *sandboxFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.runtime, "runtime", "", "OCI runtime: runc (default), crun or runsc")
	fl.StringVar(&f.template, "template", "", "template (default: host)")
	fl.StringVar(&f.repo, "repo", "", "git work tree whose HEAD is checked out at /workspace (uncommitted changes are left out, with a warning: see --repo-dirty)")
	f.files.register(fl)
	fl.StringVar(&f.user, "user", "", "default user inside (default: user)")
	fl.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	fl.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512M or 2G (default 2G)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU limit in cores (default 2)")
	fl.Int64Var(&f.pids, "pids", 0, "maximum number of processes (default 1024)")
	fl.StringVar(&f.disk, "disk", "", "drive size, e.g. 1G, allocated in full on the data filesystem (default: the daemon's --default-disk, 10G)")
	fl.Int64Var(&f.nofile, "nofile", 0, "open files per process (default: the sandbox's file budget / --pids, at most 65536; pids × nofile must fit the budget)")
	fl.StringVar(&f.ioBps, "io-bps", "", "throttle the drive's reads and writes to this many bytes/s each, e.g. 50M (default: the daemon's)")
	fl.Int64Var(&f.ioIops, "io-iops", 0, "throttle the drive's reads and writes to this many requests/s each (default: the daemon's)")
	fl.StringVar(&f.timeout, "timeout", "", "stop the sandbox after this `DURATION`, e.g. 10m (default: never; with run, the command is killed and moat exits 124)")
	f.policy.register(cmd)
	fl.StringArrayVar(&f.credentials, "credential", nil, "NAME@[http://]HOST[:PORT][,HOST...][/PATH-PREFIX][=HEADER]: the sandbox gets $NAME holding a placeholder that the proxy swaps for the stored secret NAME in the HEADER (default Authorization: Bearer/token/bare/Basic forms) of requests to HOST (port 443 unless given; under PATH-PREFIX; http:// allows plain HTTP too); responses from HOST on any port are scrubbed of the value (repeatable)")
	fl.StringArrayVar(&f.credHeaders, "credential-header", nil, "NAME@[http://]HOST[:PORT][,HOST...][/PATH-PREFIX]='Header: template with {{value}}': the proxy sets that header on requests to HOST (repeatable)")
	fl.StringVar(&f.github.token, "github-token", "", "NAME@HOST[,HOST...]: NAME is a GitHub App key; the sandbox gets $NAME holding a placeholder for an installation token, minted by moat for --github-repo with --github-permission and revoked when the sandbox stops")
	fl.StringSliceVar(&f.github.repos, "github-repo", nil, "a repository (without owner) the --github-token may touch (repeatable or comma-separated)")
	fl.StringVar(&f.agentBranchPrefix, "agent-branch-prefix", "", "the only branches git pushes from the sandbox may create or update, e.g. agent/fix-login/ (default: agent/<sandbox id>/); no tags, deletions or other refs")
	fl.BoolVar(&f.gitHold, "git-hold", false, "hold a git push that touches protected paths (CI workflows, CODEOWNERS, .moat/**, --git-protected) for a person to approve (moat change approve) or deny, instead of refusing it")
	fl.StringSliceVar(&f.github.perms, "github-permission", nil, "PERMISSION=LEVEL for the --github-token, e.g. contents=write,pull_requests=write (default contents=read)")
	f.lifecycle.register(cmd)
	f.naming.register(cmd)
	registerTier(cmd, &f.tier)
	f.users.register(fl)
	registerVisibility(fl, &f.visibility) // owner_cmds.go
}

// request validates the flags before anything is created.
func (f *sandboxFlags) request(setup bool) (v1.CreateSandboxRequest, time.Duration, error) {
	start := policy.StartCreate
	if setup && f.tier == "" { // a tier makes the setup phase itself
		start = policy.StartSetup
	}
	req := v1.CreateSandboxRequest{Runtime: f.runtime, Template: f.template, User: f.user, CPUs: f.cpus, Pids: f.pids,
		Nofile: f.nofile, IOIops: f.ioIops}
	var err error
	if req.Env, err = parseEnv(f.env); err != nil {
		return req, 0, err
	}
	if f.memory != "" {
		if req.MemoryBytes, err = parseSize(f.memory); err != nil {
			return req, 0, fmt.Errorf("--memory: %w", err)
		}
	}
	if f.disk != "" {
		if req.DiskBytes, err = parseSize(f.disk); err != nil {
			return req, 0, fmt.Errorf("--disk: %w", err)
		}
	}
	if f.ioBps != "" {
		if req.IOBps, err = parseSize(f.ioBps); err != nil {
			return req, 0, fmt.Errorf("--io-bps: %w", err)
		}
	}
	if f.cpus < 0 {
		return req, 0, fmt.Errorf("--cpus %g: must be positive", f.cpus)
	}
	if f.nofile < 0 || f.ioIops < 0 {
		return req, 0, fmt.Errorf("--nofile and --io-iops must be positive")
	}
	if f.pids < 0 {
		return req, 0, fmt.Errorf("--pids %d: must be positive", f.pids)
	}
	var timeout time.Duration
	if f.timeout != "" {
		if timeout, err = parseDuration(f.timeout); err != nil {
			return req, 0, fmt.Errorf("--timeout: %w", err)
		}
		req.TimeoutSeconds = int64((timeout + time.Second - 1) / time.Second)
	}
	if f.repo != "" {
		abs, err := filepath.Abs(f.repo)
		if err != nil {
			return req, 0, err
		}
		if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			return req, 0, fmt.Errorf("--repo %s: not a directory", f.repo)
		}
		req.Repo = abs
	}
	if req.Policy, err = f.policy.spec(start); err != nil {
		return req, 0, err
	}
	if req.Credentials, err = parseCredentials(f.credentials, f.credHeaders); err != nil {
		return req, 0, err
	}
	gh, err := f.github.credential()
	if err != nil {
		return req, 0, err
	}
	if gh != nil {
		req.Credentials = append(req.Credentials, *gh)
	}
	req.AgentBranchPrefix = f.agentBranchPrefix
	if f.gitHold {
		req.GitProtected = "hold"
	}
	if err := f.lifecycle.apply(&req); err != nil {
		return req, 0, err
	}
	if err := f.naming.apply(&req); err != nil {
		return req, 0, err
	}
	req.Tier, req.Visibility = f.tier, f.visibility
	if err := f.users.apply(&req); err != nil {
		return req, 0, err
	}
	return req, timeout, nil
}

func (a *app) runCmd() *cobra.Command {
	var f sandboxFlags
	var keep, quiet, interactive, tty bool
	var workdir, setup string
	cmd := &cobra.Command{
		Use:   "run [flags] [--] CMD [ARG...]",
		Short: "Run one command in a new sandbox, stream its output, exit with its code",
		Long: `run creates a sandbox, runs CMD in it through bash -l -c as the sandbox's user,
streams stdout and stderr, deletes the sandbox (unless --keep) and exits with CMD's exit code.
A single CMD argument is a shell line ('make test && echo ok'); several are quoted as words.
Without a running daemon, run starts one in-process (root only; not when --socket or
MOAT_SOCKET names a daemon); it is the only command that does. run's flags go before CMD:
from CMD on, every argument is the command's, with or without a -- before CMD.

CMD ends with a code of 128+N when signal N ended it (137 for the OOM killer, which run
also says on stderr). A ^C (SIGINT) or SIGTERM to moat is passed on to CMD's process
group; a second one kills it. -it runs CMD on a terminal wired to this one (like
moat shell); -i alone forwards stdin even when it is a terminal.

Network: nothing leaves the sandbox unless the policy allows it (--net, --allow, --deny,
--policy). With --setup 'CMD', CMD runs first in the "setup" phase (package registries
allowed for downloads only, unless the policy file has its own setup phase; allow
registries-publish there to publish); the sandbox then switches to the "run" phase (your
flags, default deny-all) before the main command, and lockfiles that setup changed are
reported. Without --setup the sandbox starts in "run" (or the phase the file names). At
the end, run prints the egress summary: allowed destinations and blocked attempts.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, timeout, err := f.request(setup != "")
			if err != nil {
				return err
			}
			if tty && interactive {
				if err := needTerminal("moat run -it"); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			if err := f.files.prepare(ctx, req.Repo); err != nil {
				return err
			}
			c, err := a.connectOrStart(ctx)
			if err != nil {
				return err
			}
			if a.inProcess && keep && timeout > 0 {
				// The in-process daemon ends with this command: nothing would stop the
				// kept sandbox when its time is up.
				return fmt.Errorf("--keep with --timeout needs a running daemon to stop the sandbox when its time is up; %s", startHint)
			}
			if err := checkTierSetup(ctx, c, req.Tier, setup != ""); err != nil {
				return err
			}
			sb, err := c.Create(ctx, req)
			if err != nil {
				return err
			}
			if keep {
				fmt.Fprintf(os.Stderr, "moat: sandbox %s (kept)\n", sb.ID)
			}
			defer func() {
				if !quiet {
					printEgressSummary(context.WithoutCancel(ctx), c, sb.ID)
				}
				if !keep {
					if err := c.Delete(context.WithoutCancel(ctx), sb.ID); err != nil {
						fmt.Fprintf(os.Stderr, "moat: deleting sandbox %s: %s\n", sb.ID, termSafe(err.Error()))
					}
				}
			}()
			if err := f.files.apply(ctx, c, sb.ID, f.user); err != nil {
				return err
			}
			if workdir == "" && req.Repo != "" {
				workdir = "/workspace"
			}
			// From here a ^C goes to the command (a second one kills it); the sandbox is
			// still deleted.
			// On a terminal (-t), ^C is a key the sandbox's terminal reads.
			fwdCtx, sigs := ctx, (<-chan syscall.Signal)(nil)
			if !tty {
				var stopSignals func()
				fwdCtx, sigs, stopSignals = forwardSignals(ctx)
				defer stopSignals()
			}
			execCtx := fwdCtx
			if timeout > 0 {
				var cancel context.CancelFunc
				execCtx, cancel = context.WithTimeout(fwdCtx, timeout)
				defer cancel()
			}
			exitOf := func(code int, err error) error {
				if err != nil {
					if errors.Is(execCtx.Err(), context.DeadlineExceeded) {
						fmt.Fprintf(os.Stderr, "moat: timeout after %s\n", timeout)
						return exitError{124}
					}
					if fwdCtx.Err() != nil || ctx.Err() != nil {
						return exitError{130}
					}
					return err
				}
				if code != 0 {
					return exitError{code}
				}
				return nil
			}
			if err := leaveTierSetup(ctx, c, sb, setup != ""); err != nil {
				return err
			}
			if setup != "" {
				// The setup phase ends at the first ^C (ctx's end).
				setupCtx, cancelSetup := context.WithCancel(execCtx)
				defer context.AfterFunc(ctx, cancelSetup)()
				defer cancelSetup()
				if err := runSetup(setupCtx, c, sb.ID, workdir, setup, quiet); err != nil {
					return exitOf(0, err)
				}
			}
			ereq := sdk.ExecRequest{
				Cmd: "/bin/bash", Args: []string{"-l", "-c", "--", shellLine(args)},
				Workdir: workdir, Stdout: os.Stdout, Stderr: os.Stderr, Stdin: stdinIfPiped(),
			}
			if interactive {
				ereq.Stdin = os.Stdin
			}
			if tty {
				return exitOf(0, a.interactive(execCtx, c, sb.ID, ereq))
			}
			var end sdk.ExitError
			ereq.End, ereq.Signals = &end, sigs
			code, err := c.Exec(execCtx, sb.ID, ereq)
			reportEnd(&end)
			return exitOf(code, err)
		},
	}
	f.register(cmd)
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "forward stdin to the command even when it is a terminal")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a pseudo-terminal fed with this stdin (-it: an interactive session, which needs a terminal)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the sandbox after the command ends")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "print no egress summary or setup report")
	cmd.Flags().StringVar(&workdir, "workdir", "", "working directory inside (default: /workspace with --repo, else the user's home)")
	cmd.Flags().StringVar(&setup, "setup", "", "shell line run first, in the setup phase (registries allowed, read-only), before the run phase closes the network")
	return cmd
}

// stdinIfPiped forwards stdin only when it is not a terminal (a pipe or file), so that
// `echo x | moat run -- cat` works and an interactive shell doesn't hold the command open.
func stdinIfPiped() io.Reader {
	if term.IsTerminal(int(os.Stdin.Fd())) {
		return nil
	}
	st, err := os.Stdin.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice != 0 {
		return nil
	}
	return os.Stdin
}

func (a *app) createCmd() *cobra.Command {
	var f sandboxFlags
	var asJSON bool
	var from string
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create and start a sandbox; prints its ID",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req, _, err := f.request(false)
			if err != nil {
				return err
			}
			if from != "" {
				if cmd.Flags().Changed("template") || cmd.Flags().Changed("repo") || cmd.Flags().Changed("disk") {
					return fmt.Errorf("--from takes the template, repository and disk size of the snapshot: drop --template, --repo and --disk")
				}
				req.FromSnapshot, req.Template, req.Repo, req.DiskBytes = from, "", "", 0
			}
			if err := f.files.prepare(cmd.Context(), req.Repo); err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			sb, err := c.Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			if err := f.files.apply(cmd.Context(), c, sb.ID, f.user); err != nil {
				// No half-made sandbox: one whose files did not all arrive is deleted.
				if derr := c.Delete(context.WithoutCancel(cmd.Context()), sb.ID); derr != nil {
					return fmt.Errorf("%w (and deleting sandbox %s: %v)", err, sb.ID, derr)
				}
				return err
			}
			if asJSON {
				return printJSON(sb)
			}
			fmt.Println(sb.ID)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	cmd.Flags().StringVar(&from, "from", "", "make the sandbox from this snapshot (moat snapshot ls): its files, template and repository; unset limits and policy are the snapshot's")
	return cmd
}

func (a *app) execCmd() *cobra.Command {
	var user, workdir string
	var env []string
	var tty bool
	cmd := &cobra.Command{
		Use:   "exec [flags] ID [--] CMD [ARG...]",
		Short: "Run a command in a running sandbox",
		Long: `exec runs CMD in sandbox ID through bash -l -c as the sandbox's user, streams its
output and exits with its code (128+N when signal N ended it). A single CMD argument is a
shell line; several are quoted as words. exec's flags go before CMD: from CMD on, every
argument is the command's (moat exec ID ls -la), with or without a -- before CMD.
Without -t, a ^C (SIGINT) or SIGTERM to moat is passed on to the command's process group;
a second one kills the command.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, command, err := commandArgs(cmd, args, 1)
			if err != nil {
				return err
			}
			id := pos[0]
			envs, err := parseEnv(env)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			prog, argv := execArgv(command)
			req := sdk.ExecRequest{
				Cmd: prog, Args: argv,
				User: user, Env: envs, Workdir: workdir, Stdout: os.Stdout, Stderr: os.Stderr, Stdin: stdinIfPiped(),
			}
			if tty {
				return a.interactive(cmd.Context(), c, id, req)
			}
			ctx, sigs, stop := forwardSignals(cmd.Context())
			defer stop()
			var end sdk.ExitError
			req.End, req.Signals = &end, sigs
			code, err := c.Exec(ctx, id, req)
			if err != nil {
				return err
			}
			reportEnd(&end)
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVar(&user, "user", "", "user to run as (default: the sandbox's user)")
	cmd.Flags().StringVar(&workdir, "workdir", "", "working directory (default: the user's home)")
	cmd.Flags().StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run on a pseudo-terminal")
	return cmd
}

func (a *app) shellCmd() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "shell ID",
		Short: "Open an interactive login shell in a sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needTerminal("moat shell"); err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return a.interactive(cmd.Context(), c, args[0], sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-l"}, User: user})
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "user to log in as (default: the sandbox's user)")
	return cmd
}

// interactive runs req on a PTY wired to this terminal (raw mode, resize on SIGWINCH).
func (a *app) interactive(ctx context.Context, c *sdk.Client, id string, req sdk.ExecRequest) error {
	fd := int(os.Stdin.Fd())
	cols, rows := 80, 24
	if term.IsTerminal(fd) {
		if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
			cols, rows = w, h
		}
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("terminal raw mode: %w", err)
		}
		defer term.Restore(fd, old)
	}
	req.TTY = &sdk.TermSize{Cols: uint32(cols), Rows: uint32(rows)}
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	if _, ok := req.Env["TERM"]; !ok {
		req.Env["TERM"] = envOr("TERM", "xterm-256color")
	}
	req.Stdin, req.Stdout = os.Stdin, os.Stdout
	req.Resize = watchResize(ctx, fd)
	var end sdk.ExitError
	req.End = &end
	code, err := c.Exec(ctx, id, req)
	if err != nil {
		return err
	}
	if end.Reason != "" {
		// Raw mode ends when this returns; the message must still start a line.
		fmt.Fprint(os.Stderr, "\r\n")
		reportEnd(&end)
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

func (a *app) lsCmd() *cobra.Command {
	var asJSON, quiet bool
	var filters []string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON && quiet {
				return errors.New("--json and -q: choose one")
			}
			if err := checkFilters(filters); err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.ListFiltered(cmd.Context(), filters)
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []v1.Sandbox{}
				}
				return printJSON(list)
			}
			if quiet {
				for _, sb := range list {
					fmt.Println(termSafe(sb.ID))
				}
				return nil
			}
			return printSandboxTable(list, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the IDs")
	cmd.Flags().StringArrayVar(&filters, "filter", nil, filterHelp)
	return cmd
}

func (a *app) inspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect ID",
		Short: "Print one sandbox as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			sb, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(sb)
		},
	}
}

func (a *app) eventsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "events ID",
		Short: "Show a sandbox's lifecycle events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			evs, err := c.Events(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(evs)
			}
			for _, e := range evs {
				fmt.Printf("%s  %-10s %s\n", e.Time.Local().Format(time.RFC3339), termSafe(e.Kind), termSafe(e.Detail))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) lifecycleCmd(op, short string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   op + " ID...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			fn := map[string]func(context.Context, string) (*v1.Sandbox, error){
				"stop": c.Stop, "start": c.Start, "pause": c.Pause, "resume": c.Resume,
			}[op]
			var errs []error
			for _, id := range args {
				sb, err := fn(cmd.Context(), id)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if asJSON {
					_ = printJSON(sb)
				} else {
					fmt.Printf("%s %s\n", sb.ID, sb.State)
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) rmCmd() *cobra.Command {
	var all, force, asJSON bool
	var filters []string
	cmd := &cobra.Command{
		Use:   "rm ID... | rm --all [--force] [--filter F]",
		Short: "Delete sandboxes (processes, drive and everything else)",
		Long: `rm deletes the sandboxes named (ID, name or unique ID prefix), whatever their state.
rm --all deletes every stopped sandbox (or those --filter selects) and keeps running and
paused ones, naming them; --all --force deletes those too.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return errors.New("rm: give IDs or --all, not both")
			case !all && len(args) == 0:
				return errors.New("rm: give the sandboxes to delete (ID, name or ID prefix), or --all")
			case !all && (force || len(filters) > 0 || asJSON):
				return errors.New("rm: --force, --filter and --json go with --all")
			}
			if err := checkFilters(filters); err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if all {
				return rmAll(cmd.Context(), c, filters, force, asJSON)
			}
			var errs []error
			for _, id := range args {
				if err := c.Delete(cmd.Context(), id); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Println(id)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "delete every stopped sandbox (with --filter: those it selects)")
	cmd.Flags().BoolVar(&force, "force", false, "with --all: running and paused sandboxes too")
	cmd.Flags().StringArrayVar(&filters, "filter", nil, "with --all: "+filterHelp)
	cmd.Flags().BoolVar(&asJSON, "json", false, "with --all: print what was deleted as JSON")
	return cmd
}

func (a *app) serveCmd() *cobra.Command {
	var listen, diskReserve, drivePool string
	var warm []string
	var warmRunsc int
	var diskOvercommit bool
	var e2bTemplates []string
	var life serveLifecycle
	var max maxFlags
	var ioBps, maxIOBps string
	var ioIops, maxIOIops, fileBudget int64
	var shareData bool
	var install serveInstall
	var approvalFlags approvalServeFlags // approval_cmds.go
	var auditFlags auditServeFlags       // audit_cmds.go
	var metricsFlags metricsServeFlags   // metrics_cmds.go
	var previewFlags previewServeFlags   // port_cmds.go
	var meterInterval time.Duration      // usage_cmds.go
	var consoleSecure bool
	var cluster clusterServeFlags // cluster_cmds.go
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the moat daemon",
		Long: `serve runs the daemon: SQLite state under --data, the API on --socket (mode 0600) and,
with --listen ADDR, on TCP for clients with an API key (moat apikey create). The TCP listener
also serves the E2B-compatible API: point an E2B SDK program at it with
E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=<key>.

serve never takes over a socket a live daemon answers on, and refuses a data directory
another daemon (serve or an in-process moat run) uses, unless --share-data.
With --install it starts nothing: it writes a systemd unit that runs this binary as
` + "`moat serve`" + ` with the other flags given (see --install).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.logLevel == "warn" {
				a.logLevel = "info"
			}
			if cluster.given(cmd) { // cluster_cmds.go
				tmpl, err := parseE2BTemplates(e2bTemplates)
				if err != nil {
					return err
				}
				var pcfg daemon.Config // --preview-domain: the front's own
				if err := previewFlags.apply(&pcfg); err != nil {
					return err
				}
				if previewFlags.allowPublic {
					return errors.New("--allow-public-ports is a node daemon's flag, not the cluster front's")
				}
				return cluster.serve(cmd.Context(), a, listen, tmpl, pcfg.Previews.Domain)
			}
			cfg, err := a.daemonConfig()
			if err != nil {
				return err
			}
			cfg.Listen = listen
			cfg.Exclusive = !shareData
			if meterInterval < time.Second {
				return fmt.Errorf("--meter-interval %s: at least 1s", meterInterval)
			}
			cfg.MeterInterval = meterInterval
			if !install.install {
				if cfg.SocketListener, err = activatedSocket(); err != nil {
					return err
				}
				if cfg.SocketListener != nil {
					cfg.Socket = cfg.SocketListener.Addr().String()
				}
			}
			if cmd.Flags().Changed("warm-runsc") {
				warm = append(warm, "runsc:host="+strconv.Itoa(warmRunsc))
			}
			if cfg.Warm, err = sandbox.ParseWarm(warm); err != nil {
				return err
			}
			cfg.DiskOvercommit = diskOvercommit
			if err := approvalFlags.apply(&cfg); err != nil {
				return err
			}
			if err := auditFlags.apply(&cfg); err != nil {
				return err
			}
			if err := metricsFlags.apply(&cfg); err != nil {
				return err
			}
			if err := previewFlags.apply(&cfg); err != nil {
				return err
			}
			cfg.ConsoleSecureCookie = consoleSecure
			if err := life.apply(&cfg); err != nil {
				return err
			}
			if diskReserve != "" {
				if cfg.DiskReserve, err = parseSize(diskReserve); err != nil || cfg.DiskReserve <= 0 {
					return fmt.Errorf("--disk-reserve %q: want a positive size, e.g. 1G", diskReserve)
				}
			}
			if drivePool != "" {
				if cfg.DrivePool, err = parseSize(drivePool); err != nil || cfg.DrivePool <= 0 {
					return fmt.Errorf("--drive-pool %q: want a positive size, e.g. 64G", drivePool)
				}
			}
			m, err := max.maxima(cmd, v1.KeyMaxima{})
			if err != nil {
				return err
			}
			cfg.MaxLimits = sandbox.Limits{MemoryBytes: m.MemoryBytes, CPUs: m.CPUs, Pids: m.Pids, DiskBytes: m.DiskBytes, IOIops: maxIOIops}
			cfg.DefaultLimits.IOIops, cfg.FileBudget = ioIops, fileBudget
			for _, f := range []struct {
				flag, val string
				to        *int64
			}{{"io-bps", ioBps, &cfg.DefaultLimits.IOBps}, {"max-io-bps", maxIOBps, &cfg.MaxLimits.IOBps}} {
				if f.val != "" {
					if *f.to, err = parseSize(f.val); err != nil {
						return fmt.Errorf("--%s: %w", f.flag, err)
					}
				}
			}
			// An explicit 0 turns the default throttle off (daemon.IOUnthrottled).
			if cfg.DefaultLimits.IOBps == 0 && cmd.Flags().Changed("io-bps") {
				cfg.DefaultLimits.IOBps = daemon.IOUnthrottled
			}
			if ioIops == 0 && cmd.Flags().Changed("io-iops") {
				cfg.DefaultLimits.IOIops = daemon.IOUnthrottled
			}
			if cfg.E2BTemplates, err = parseE2BTemplates(e2bTemplates); err != nil {
				return err
			}
			if install.install {
				// Every flag checked above: the unit starts a daemon that works.
				return install.run(cmd)
			}
			d, err := daemon.New(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Serve(cmd.Context(), nil)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "also serve the API on this TCP address (API keys required) and the web console at /ui/")
	cmd.Flags().BoolVar(&consoleSecure, "console-secure-cookie", false, "a TLS proxy serves --listen: the web console's session cookie is Secure and its origin https")
	approvalFlags.register(cmd)
	auditFlags.register(cmd)   // audit_cmds.go
	metricsFlags.register(cmd) // metrics_cmds.go
	previewFlags.register(cmd) // port_cmds.go
	cluster.register(cmd)      // cluster_cmds.go
	cmd.Flags().BoolVar(&shareData, "share-data", false, "run even though another moat daemon (serve --share-data, or an in-process moat run) uses the data directory: both manage the same sandboxes")
	install.register(cmd)
	install.socket = func() string { p, _ := a.socketPath(); return p }
	cmd.Flags().StringArrayVar(&warm, "warm", []string{"runc:host=2", "runc:debian=2"}, "warm pool: RUNTIME:TEMPLATE=N keeps N sandboxes of that kind (default limits and disk) started for fast creates (repeatable; N alone is runc:host=N, 0 turns a pool off; giving --warm replaces the defaults; a pool whose template does not exist yet fills once it does; runsc pools serve default limits only)")
	cmd.Flags().DurationVar(&meterInterval, "meter-interval", 15*time.Second, "how often the usage ledger samples the sandboxes' cgroups (moat usage)")
	cmd.Flags().IntVar(&warmRunsc, "warm-runsc", 0, "the same as --warm runsc:host=N")
	cmd.Flags().BoolVar(&diskOvercommit, "disk-overcommit", false, "let drive sizes add up to more than the data filesystem holds: drives stay sparse, and once it is full every sandbox writing new blocks gets I/O errors (default: each drive is allocated in full at create, and a create that does not fit is refused)")
	cmd.Flags().StringVar(&drivePool, "drive-pool", "", "keep drives in an XFS pool of this size (a file in the data directory, allocated in full, loop-mounted on drives/) so snapshots and forks clone drives without copying (needs mkfs.xfs: apt-get install xfsprogs); a pool once made is used at every start")
	cmd.Flags().StringVar(&diskReserve, "disk-reserve", "", "space of the data filesystem no drive may take, kept for the database, logs and layers (default 2% of it, at least 256M, at most 4G)")
	cmd.Flags().StringArrayVar(&e2bTemplates, "e2b-template", nil, "map an E2B template name to a moat template, NAME=TEMPLATE (repeatable; default base=debian)")
	max.register(cmd, "every sandbox (the host's capacity bounds them in any case)")
	life.register(cmd)
	cmd.Flags().StringVar(&ioBps, "io-bps", "", "default drive throttle of a sandbox in bytes/s (reads and writes each; default 16M; 0: none)")
	cmd.Flags().Int64Var(&ioIops, "io-iops", 0, "default drive throttle of a sandbox in requests/s (reads and writes each; default 400; 0: none)")
	cmd.Flags().StringVar(&maxIOBps, "max-io-bps", "", "largest --io-bps a sandbox may ask for (0: none)")
	cmd.Flags().Int64Var(&maxIOIops, "max-io-iops", 0, "largest --io-iops a sandbox may ask for (0: none)")
	cmd.Flags().Int64Var(&fileBudget, "file-budget", 0, "most open files one sandbox may hold, pids × nofile (default: fs.file-max / 4)")
	return cmd
}

// printJSON prints v as indented JSON, with every non-printable rune in its strings
// escaped (jsonSafe).
func printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(jsonSafe(b), '\n'))
	return err
}
