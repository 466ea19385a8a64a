package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/apiserver"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/safegit"
	"github.com/moatdev/moat/sdk"
)

// policyFlags are the egress flags of run, create and policy set.
type policyFlags struct {
	net         string
	allow, deny []string
	http        []string
	file        string
	ask         bool          // ask mode: hold what no rule allows for approval
	askFor      []string      // ask rules
	askWait     time.Duration // the longest hold
}

func (p *policyFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&p.net, "net", "", "egress: allow-all or deny-all (default: deny-all, or only what --allow names)")
	fl.StringArrayVar(&p.allow, "allow", nil, "allow `HOST`[:PORT], *.DOMAIN, CIDR or a set such as registries (repeatable)")
	fl.StringArrayVar(&p.deny, "deny", nil, "deny HOST[:PORT], *.DOMAIN or CIDR; deny rules win (repeatable)")
	fl.StringArrayVar(&p.http, "http", nil, "allow HOST[:PORTS] and only the requests named: 'HOST [METHOD[,METHOD]] [/PATH-PREFIX]'; moat terminates TLS to check each (repeatable)")
	fl.StringVar(&p.file, "policy", "", "egress policy file (YAML; may name phases)")
	fl.BoolVar(&p.ask, "ask", false, "hold connections no rule allows (and none denies) for a person's approval instead of refusing them")
	fl.StringArrayVar(&p.askFor, "ask-for", nil, "hold connections to `HOST`[:PORTS], *.DOMAIN or CIDR for approval when no allow rule allows them (repeatable)")
	fl.DurationVar(&p.askWait, "ask-wait", 0, "the longest a connection is held for approval (default 2m)")
}

func (p *policyFlags) set() bool {
	return p.net != "" || len(p.allow) > 0 || len(p.deny) > 0 || len(p.http) > 0 || p.file != "" || p.asks()
}

func (p *policyFlags) asks() bool { return p.ask || len(p.askFor) > 0 || p.askWait != 0 }

// spec builds the policy the flags describe for where it is applied; nil when none is
// given (the daemon's default, deny-all) and there is no setup phase. With StartSetup,
// the policy gets a "setup" phase (registries, read-only, unless the file has one) and
// starts in it. Otherwise a policy file that names no phase starts as
// policy.Spec.StartPhase says: in "run" at create, and for StartReplace the daemon
// decides (it knows the sandbox's current phase), so the phase is left empty.
func (p *policyFlags) spec(start policy.Start) (*v1.Policy, error) {
	setup := start == policy.StartSetup
	if !p.set() && !setup {
		return nil, nil
	}
	if p.net != "" && p.net != "allow-all" && p.net != "deny-all" {
		return nil, fmt.Errorf("--net %q: want allow-all or deny-all", p.net)
	}
	var s policy.Spec
	if p.file != "" {
		if p.net != "" || len(p.allow) > 0 || len(p.deny) > 0 || len(p.http) > 0 || len(p.askFor) > 0 {
			return nil, errors.New("--policy cannot be combined with --net, --allow, --deny, --http or --ask-for: put the rules in the file")
		}
		data, err := os.ReadFile(p.file)
		if err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
		if s, err = policy.ParseFile(data); err != nil {
			return nil, fmt.Errorf("--policy %s: %w", p.file, err)
		}
	} else {
		s = policy.Single(policy.Rules{Net: p.net, Allow: p.allow, Deny: p.deny, HTTP: p.http, Ask: p.askFor})
		if !p.set() {
			s = policy.DenyAll()
		}
	}
	if p.ask {
		s.AskAll = true
	}
	if p.askWait != 0 {
		if p.askWait < policy.MinAskWait || p.askWait > policy.MaxAskWait {
			return nil, fmt.Errorf("--ask-wait %s: must be between %s and %s", p.askWait, policy.MinAskWait, policy.MaxAskWait)
		}
		s.AskWait = p.askWait.String()
	}
	if p.askWait != 0 && !s.HasAsk() {
		return nil, errors.New("--ask-wait needs --ask, --ask-for or ask rules in the policy file")
	}
	if setup {
		if _, ok := s.Phases["run"]; !ok {
			return nil, fmt.Errorf("--setup needs a policy with a \"run\" phase (the file names %s)", strings.Join(slices.Sorted(maps.Keys(s.Phases)), ", "))
		}
		if _, ok := s.Phases["setup"]; !ok {
			s.Phases["setup"] = policy.Rules{Allow: []string{"registries"}}
		}
	}
	if start != policy.StartReplace {
		var err error
		if s, err = s.WithStartPhase(start, ""); err != nil {
			return nil, fmt.Errorf("egress policy: %w", err)
		}
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("egress policy: %w", err)
	}
	out := apiserver.ToAPIPolicy(s)
	return &out, nil
}

// lockfileScript prints the SHA-256 of every lockfile (safegit.LockfileNames) under the
// working directory.
func lockfileScript() string {
	return `find . -maxdepth 6 \( -name node_modules -o -name .git -o -name vendor -o -name target -o -name .venv \) -prune -o -type f \( ` +
		"-name " + strings.Join(safegit.LockfileNames(), " -o -name ") +
		` \) -print0 2>/dev/null | xargs -0 -r sha256sum 2>/dev/null; true`
}

// runSetup runs the setup command in the setup phase, reports the lockfiles it changed,
// and switches the sandbox to the run phase.
func runSetup(ctx context.Context, c *sdk.Client, id, workdir, line string, quiet bool) error {
	before, err := lockfiles(ctx, c, id, workdir)
	if err != nil {
		return err
	}
	if !quiet {
		fmt.Fprintf(os.Stderr, "moat: setup phase: %s\n", line)
	}
	code, err := c.Exec(ctx, id, sdk.ExecRequest{
		Cmd: "/bin/bash", Args: []string{"-l", "-c", line}, Workdir: workdir, Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "moat: setup failed with exit code %d; the main command did not run\n", code)
		return exitError{code}
	}
	after, err := lockfiles(ctx, c, id, workdir)
	if err != nil {
		return err
	}
	if changes := diffChecksums(before, after); len(changes) > 0 && !quiet {
		fmt.Fprintf(os.Stderr, "moat: setup changed lockfiles: %s\n", termSafe(strings.Join(changes, ", ")))
	}
	res, err := c.SetPolicy(ctx, id, v1.SetPolicyRequest{Phase: "run"})
	if err != nil {
		return fmt.Errorf("switching to the run phase: %w", err)
	}
	if !quiet {
		fmt.Fprintf(os.Stderr, "moat: run phase: %s", describeRules(res.Sandbox.Policy.Phases["run"]))
		if res.ConnectionsCut > 0 {
			fmt.Fprintf(os.Stderr, " (%d open connections cut)", res.ConnectionsCut)
		}
		fmt.Fprintln(os.Stderr)
	}
	return nil
}

func lockfiles(ctx context.Context, c *sdk.Client, id, workdir string) (map[string]string, error) {
	var out bytes.Buffer
	if _, err := c.Exec(ctx, id, sdk.ExecRequest{
		Cmd: "/bin/bash", Args: []string{"-c", lockfileScript()}, Workdir: workdir, Stdout: &out, Stderr: &bytes.Buffer{},
	}); err != nil {
		return nil, fmt.Errorf("listing lockfiles: %w", err)
	}
	return parseChecksums(out.Bytes()), nil
}

// parseChecksums reads sha256sum output ("HEX  PATH" lines; a leading backslash marks an
// escaped path) into path → hash. Lines that are not checksums are skipped.
func parseChecksums(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		escaped := strings.HasPrefix(line, `\`)
		if escaped {
			line = line[1:]
		}
		if len(line) < 67 || (line[64:66] != "  " && line[64:66] != " *") {
			continue
		}
		sum := line[:64]
		if _, err := hex.DecodeString(sum); err != nil {
			continue
		}
		path := line[66:]
		if escaped {
			path = strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\r`, "\r").Replace(path)
		}
		out[strings.TrimPrefix(path, "./")] = sum
	}
	return out
}

// diffChecksums lists what changed between two lockfile listings, sorted.
func diffChecksums(before, after map[string]string) []string {
	var out []string
	for path, sum := range after {
		switch old, ok := before[path]; {
		case !ok:
			out = append(out, path+" (created)")
		case old != sum:
			out = append(out, path+" (modified)")
		}
	}
	for path := range before {
		if _, ok := after[path]; !ok {
			out = append(out, path+" (deleted)")
		}
	}
	sort.Strings(out)
	return out
}

func describeRules(r v1.PolicyRules) string {
	var parts []string
	if r.Net != "" {
		parts = append(parts, r.Net)
	}
	if len(r.Allow) > 0 {
		parts = append(parts, "allow "+strings.Join(r.Allow, ", "))
	}
	if len(r.HTTP) > 0 {
		parts = append(parts, "http "+strings.Join(r.HTTP, ", "))
	}
	if len(r.Ask) > 0 {
		parts = append(parts, "ask "+strings.Join(r.Ask, ", "))
	}
	if len(r.Deny) > 0 {
		parts = append(parts, "deny "+strings.Join(r.Deny, ", "))
	}
	if len(parts) == 0 {
		return "deny-all"
	}
	return strings.Join(parts, "; ")
}

// destination is how a log entry names where the sandbox tried to go, safe to print.
func destination(e v1.EgressEntry) string {
	host := termSafe(e.Name)
	if host == "" {
		host = termSafe(e.Addr)
	}
	switch e.Proto {
	case "dns":
		return host + " (dns)"
	case "http":
		return fmt.Sprintf("%s:%d (http)", host, e.Port)
	case "git":
		return fmt.Sprintf("%s:%d (git)", host, e.Port)
	}
	return fmt.Sprintf("%s:%d", host, e.Port)
}

// printEgressSummary prints, on stderr, where the sandbox connected and what was blocked.
func printEgressSummary(ctx context.Context, c *sdk.Client, id string) {
	entries, err := c.Egress(ctx, id, 0)
	if err != nil || len(entries) == 0 {
		return
	}
	writeEgressSummary(os.Stderr, entries)
}

// writeEgressSummary writes the summary of entries printEgressSummary prints.
func writeEgressSummary(w io.Writer, entries []v1.EgressEntry) {
	type agg struct {
		n        int
		up, down int64
		why      string
	}
	allowed, blocked := map[string]*agg{}, map[string]*agg{}
	var nAllowed, nBlocked int
	for _, e := range entries {
		if (e.Proto == "dns" || e.Proto == "http" || e.Proto == "git") && e.Allowed {
			continue // the connection is what counts
		}
		key := destination(e)
		m, why := allowed, ""
		if e.Allowed {
			nAllowed++
		} else {
			m, why = blocked, termSafe(e.Reason)
			nBlocked++
			key += "\x00" + why
		}
		a := m[key]
		if a == nil {
			a = &agg{why: why}
			m[key] = a
		}
		a.n++
		a.up += e.BytesUp
		a.down += e.BytesDown
	}
	if nAllowed+nBlocked == 0 {
		return
	}
	fmt.Fprintf(w, "moat: egress: %d allowed, %d blocked\n", nAllowed, nBlocked)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, k := range slices.Sorted(maps.Keys(allowed)) {
		a := allowed[k]
		fmt.Fprintf(tw, "  allowed\t%s\t×%d\t%s up, %s down\n", k, a.n, humanBytes(a.up), humanBytes(a.down))
	}
	for _, k := range slices.Sorted(maps.Keys(blocked)) {
		a := blocked[k]
		dest, _, _ := strings.Cut(k, "\x00")
		fmt.Fprintf(tw, "  BLOCKED\t%s\t×%d\t%s\n", dest, a.n, a.why)
	}
	tw.Flush()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func (a *app) egressCmd() *cobra.Command {
	var asJSON, follow, blockedOnly bool
	var user string
	cmd := &cobra.Command{
		Use:   "egress ID",
		Short: "Show a sandbox's egress log: every allowed and blocked destination",
		Long: `egress lists every decision of the sandbox's network boundary: DNS answers and
connections, allowed or BLOCKED, with the rule or reason, bytes and duration. --follow keeps
printing new decisions (an open connection is printed again when it ends). USER is the
sandbox user who made the connection (moat user), "-" for root and users moat does not tell
apart; --user keeps one user's entries.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			keep := func(e v1.EgressEntry) bool {
				return (!blockedOnly || !e.Allowed) && (!cmd.Flags().Changed("user") || e.User == user)
			}
			if follow {
				tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
				if !asJSON {
					fmt.Fprintln(tw, "TIME\tPHASE\tVERDICT\tUSER\tDESTINATION\tDETAIL")
				}
				return c.FollowEgress(cmd.Context(), args[0], 0, func(e v1.EgressEntry) error {
					if !keep(e) {
						return nil
					}
					if asJSON {
						return printJSONLine(e)
					}
					printEgressRow(tw, e)
					return tw.Flush()
				})
			}
			entries, err := c.Egress(cmd.Context(), args[0], 0)
			if err != nil {
				return err
			}
			entries = slices.DeleteFunc(entries, func(e v1.EgressEntry) bool { return !keep(e) })
			if asJSON {
				if entries == nil {
					entries = []v1.EgressEntry{}
				}
				return printJSON(entries)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tPHASE\tVERDICT\tUSER\tDESTINATION\tDETAIL")
			for _, e := range entries {
				printEgressRow(tw, e)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (NDJSON with --follow)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new decisions")
	cmd.Flags().BoolVar(&blockedOnly, "blocked", false, "only blocked attempts")
	cmd.Flags().StringVar(&user, "user", "", "only the entries of this sandbox `USER` (\"\": root and users moat does not tell apart)")
	return cmd
}

func printEgressRow(tw *tabwriter.Writer, e v1.EgressEntry) {
	verdict := "allowed"
	detail := termSafe(e.Rule)
	if !e.Allowed && e.Proto == "dns" && (e.Rule == "ask-all" || strings.HasPrefix(e.Rule, "ask ")) {
		verdict, detail = "ask", termSafe(e.Reason) // answered; the connection is held for approval
	} else if !e.Allowed {
		verdict, detail = "BLOCKED", termSafe(e.Reason)
	} else if e.Proto == "git" {
		detail = termSafe(e.Reason)
	} else if e.Proto == "tcp" {
		state := fmt.Sprintf("%s up, %s down, %s", humanBytes(e.BytesUp), humanBytes(e.BytesDown), (time.Duration(e.DurationMS * float64(time.Millisecond))).Round(time.Millisecond))
		if e.Open {
			state = "open"
		}
		detail = strings.TrimSpace(detail + "  " + state)
		if e.Error != "" {
			detail += "  (" + termSafe(e.Error) + ")"
		}
	}
	user := "-"
	if e.User != "" {
		user = termSafe(e.User)
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("15:04:05.000"), termSafe(e.Phase), verdict, user, destination(e), detail)
}

func (a *app) policyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Show or change a sandbox's egress policy and phase",
	}
	var pf policyFlags
	var phase string
	var asJSON bool
	set := &cobra.Command{
		Use:   "set ID",
		Short: "Replace a sandbox's egress policy or switch its phase, at once",
		Long: `set applies at once to a running sandbox: open connections the new policy does not
allow are cut. --phase switches phase within the current policy (or the new one). A new
policy file that names no phase keeps the sandbox's current phase if it has one of that
name, else starts in "run".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pf.spec(policy.StartReplace)
			if err != nil {
				return err
			}
			if p == nil && phase == "" {
				return errors.New("give a policy (--net, --allow, --deny, --ask or --policy) or a --phase")
			}
			if p != nil && phase != "" {
				p.Phase = phase
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.SetPolicy(cmd.Context(), args[0], v1.SetPolicyRequest{Policy: p, Phase: phase})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(res)
			}
			pol := res.Sandbox.Policy
			fmt.Printf("phase %s: %s\n", pol.Phase, describeRules(pol.Phases[pol.Phase]))
			if line := describeAsk(pol); line != "" {
				fmt.Println(line)
			}
			if res.ConnectionsCut > 0 {
				fmt.Printf("%d open connections cut\n", res.ConnectionsCut)
			}
			return nil
		},
	}
	pf.register(set)
	set.Flags().StringVar(&phase, "phase", "", "switch to this phase")
	set.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var showJSON bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show a sandbox's egress policy",
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
			if showJSON {
				return printJSON(sb.Policy)
			}
			for _, name := range slices.Sorted(maps.Keys(sb.Policy.Phases)) {
				mark := " "
				if name == sb.Policy.Phase {
					mark = "*"
				}
				fmt.Printf("%s %s: %s\n", mark, name, describeRules(sb.Policy.Phases[name]))
			}
			if line := describeAsk(sb.Policy); line != "" {
				fmt.Println(line)
			}
			return nil
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")
	cmd.AddCommand(set, show)
	return cmd
}

// printJSONLine prints v as one line of JSON (jsonSafe).
func printJSONLine(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(jsonSafe(b), '\n'))
	return err
}

// describeAsk is the line `moat policy` prints about ask mode, "" when the policy has none.
func describeAsk(p v1.Policy) string {
	asks := p.AskAll
	for _, r := range p.Phases {
		asks = asks || len(r.Ask) > 0
	}
	if !asks {
		return ""
	}
	wait := p.AskWait
	if wait == "" {
		wait = "the daemon's default (2m)"
	}
	what := "connections matching an ask rule"
	if p.AskAll {
		what = "every connection no rule allows or denies"
	}
	return "ask: " + what + " is held for approval, at most " + termSafe(wait)
}
