package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/secrets"
)

func (a *app) secretCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "secret", Short: "Manage secrets (kept encrypted by the daemon; values are never shown again)"}
	var ghApp v1.GitHubApp
	var setScope scopeFlags
	set := &cobra.Command{
		Use:   "set NAME --hosts HOST[,HOST...]",
		Short: "Store a secret and where it may be sent, reading its value from stdin",
		Long: `set stores a secret under NAME (upper-case letters, digits and underscores), replacing
any value it had. The value is read from stdin, never from the command line: typed at a
hidden prompt when stdin is a terminal, else piped, e.g.

  printf %s "$GITHUB_TOKEN" | moat secret set GITHUB_TOKEN --hosts api.github.com,github.com

One trailing newline is dropped. Values are 1 byte to 64 KiB.

The scope says where the value may ever be sent; every sandbox's binding of the secret
must lie within it, or the sandbox is refused:

  --hosts        HOST, *.DOMAIN (its subdomains), either with :PORT (default 443)
  --methods      only these HTTP methods (bindings without methods get these)
  --path-prefix  only request paths under this prefix (bindings without one get it)
  --plain-http   bindings may send it in plain HTTP too (default: TLS only)
  --github-repo  for a GitHub App key: the only repositories tokens may be minted for

A new secret needs --hosts. Without scope flags, replacing a value keeps the scope;
'moat secret scope' changes the scope without the value. API keys bind only the secrets
they are granted (moat apikey grant).

With --github-app, the value is a GitHub App's private key (PEM) and the secret stands for
the App's installation: moat mints short-lived installation tokens from it for each
sandbox that binds it with --github-token, limited to that sandbox's --github-repo and
--github-permission, and revokes them when the sandbox stops:

  moat secret set GITHUB_TOKEN --github-app 123456 --installation 7890 \
      --hosts github.com,api.github.com --github-repo widget < app.private-key.pem`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := secrets.CheckName(name); err != nil {
				return err
			}
			if ghApp.AppID == "" && (ghApp.InstallationID != 0 || ghApp.APIURL != "") {
				return errors.New("--installation and --github-api describe a --github-app; give its ID")
			}
			if ghApp.AppID != "" && ghApp.InstallationID <= 0 {
				return errors.New("--github-app needs --installation ID (the number in the App installation's settings URL)")
			}
			scope, err := setScope.scope(false)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if scope == nil {
				// Before the value is typed: a new secret without a scope could not be bound.
				list, err := c.Secrets(cmd.Context())
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(list, func(s v1.SecretInfo) bool { return s.Name == name }) {
					return fmt.Errorf("%s is a new secret: give --hosts, the hosts its value may be sent to (e.g. --hosts api.example.com,*.example.org)", name)
				}
			}
			value, err := readSecret(cmd.Context(), name, os.Stdin, os.Stderr)
			if err != nil {
				return err
			}
			if ghApp.AppID != "" {
				return c.SetGitHubApp(cmd.Context(), name, value, ghApp, scope)
			}
			return c.SetSecret(cmd.Context(), name, value, scope)
		},
	}
	set.Flags().StringVar(&ghApp.AppID, "github-app", "", "the value is this GitHub App's private key (App ID or client ID)")
	set.Flags().Int64Var(&ghApp.InstallationID, "installation", 0, "the App installation tokens are minted for (with --github-app)")
	set.Flags().StringVar(&ghApp.APIURL, "github-api", "", "GitHub REST API base (default https://api.github.com; GitHub Enterprise: https://HOST/api/v3)")
	setScope.register(set)
	var newScope scopeFlags
	scopeCmd := &cobra.Command{
		Use:   "scope NAME --hosts HOST[,HOST...]",
		Short: "Replace where a stored secret may be sent, keeping its value",
		Long: `scope replaces the scope of the secret NAME (see 'moat secret set --help' for the flags);
the value stays. New sandboxes' bindings must lie within the new scope; running sandboxes'
bindings outside it are no longer injected from their next connection on.

  moat secret scope API_TOKEN --hosts api.example.com --methods GET,POST --path-prefix /v1/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := secrets.CheckName(args[0]); err != nil {
				return err
			}
			scope, err := newScope.scope(true)
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return c.SetSecretScope(cmd.Context(), args[0], *scope)
		},
	}
	newScope.register(scopeCmd)
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List secrets: names, kinds, scopes, dates and the sandboxes that bind them (never values)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Secrets(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []v1.SecretInfo{}
				}
				return printJSON(list)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKIND\tSCOPE\tCREATED\tUPDATED\tBOUND IN")
			for _, s := range list {
				kind := "static"
				if g := s.GitHubApp; g != nil {
					kind = fmt.Sprintf("github-app %s installation %d", g.AppID, g.InstallationID)
					if g.APIURL != "" {
						kind += " at " + g.APIURL
					}
				}
				bound := "-"
				if len(s.Bindings) > 0 {
					parts := make([]string, 0, len(s.Bindings))
					for _, b := range s.Bindings {
						parts = append(parts, b.Sandbox+" → "+strings.Join(b.Hosts, ","))
					}
					bound = strings.Join(parts, "; ")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(s.Name), termSafe(kind), termSafe(scopeText(s.Scope)), s.Created.Local().Format("2006-01-02 15:04:05"), s.Updated.Local().Format("2006-01-02 15:04:05"), termSafe(bound))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a secret",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return c.DeleteSecret(cmd.Context(), args[0])
		},
	}
	cmd.AddCommand(set, scopeCmd, ls, rm)
	return cmd
}

// scopeFlags are the flags of a secret's scope, for moat secret set and scope.
type scopeFlags struct {
	hosts, methods, repos, headers []string
	prefix                         string
	plain                          bool
}

func (f *scopeFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.hosts, "hosts", nil, "where the value may be sent: HOST, *.DOMAIN, either with :PORT (default 443) (comma-separated or repeated)")
	fl.StringSliceVar(&f.methods, "methods", nil, "the only HTTP methods requests carrying the value may have, e.g. GET,POST")
	fl.StringVar(&f.prefix, "path-prefix", "", "the path prefix of every request carrying the value, e.g. /v1/")
	fl.BoolVar(&f.plain, "plain-http", false, "bindings may send the value in plain HTTP too (default: TLS only)")
	fl.StringSliceVar(&f.repos, "github-repo", nil, "for a GitHub App key: the only repositories (without owner) tokens may be minted for")
	fl.StringSliceVar(&f.headers, "headers", nil, "the request headers bindings may write the value into, e.g. x-api-key,Authorization (default: Authorization only)")
}

// scope returns the scope the flags give; nil when none is given and none is required.
func (f *scopeFlags) scope(required bool) (*v1.SecretScope, error) {
	if len(f.hosts) == 0 {
		if len(f.methods) > 0 || f.prefix != "" || f.plain || len(f.repos) > 0 || len(f.headers) > 0 {
			return nil, errors.New("--methods, --path-prefix, --plain-http, --github-repo and --headers narrow --hosts; give it too (the scope is replaced whole)")
		}
		if required {
			return nil, errors.New("give --hosts: the hosts the value may be sent to (e.g. --hosts api.example.com,*.example.org)")
		}
		return nil, nil
	}
	return &v1.SecretScope{Hosts: f.hosts, Methods: f.methods, PathPrefix: f.prefix, PlainHTTP: f.plain, Repositories: f.repos, Headers: f.headers}, nil
}

// scopeText renders a secret's scope for moat secret ls.
func scopeText(sc *v1.SecretScope) string {
	if sc == nil {
		return "none (cannot be bound)"
	}
	parts := []string{strings.Join(sc.Hosts, ",")}
	if len(sc.Methods) > 0 {
		parts = append(parts, strings.Join(sc.Methods, ","))
	}
	if sc.PathPrefix != "" {
		parts = append(parts, sc.PathPrefix)
	}
	if sc.PlainHTTP {
		parts = append(parts, "plain-http")
	}
	if len(sc.Repositories) > 0 {
		parts = append(parts, "repos "+strings.Join(sc.Repositories, ","))
	}
	headers := sc.Headers
	if len(headers) == 0 {
		headers = []string{"Authorization"}
	}
	parts = append(parts, "headers "+strings.Join(headers, ","))
	return strings.Join(parts, " ")
}

// readSecret reads the value of secret name from in: at a prompt on prompt, without echo,
// when in is a terminal; else all of in, through readSecretValue.
func readSecret(ctx context.Context, name string, in *os.File, prompt io.Writer) (string, error) {
	fd := int(in.Fd())
	if !term.IsTerminal(fd) {
		return readSecretValue(in)
	}
	fmt.Fprintf(prompt, "Value for %s (input hidden): ", name)
	b, err := readHidden(ctx, fd)
	fmt.Fprintln(prompt)
	if err != nil {
		return "", fmt.Errorf("reading the value: %w", err)
	}
	return checkSecretValue(b)
}

// readHidden reads a line from the terminal fd without echo. An interrupt (ctx ends)
// restores the terminal and returns at once.
func readHidden(ctx context.Context, fd int) ([]byte, error) {
	old, err := term.GetState(fd)
	if err != nil {
		return nil, err
	}
	type result struct {
		b   []byte
		err error
	}
	// The reader gets a descriptor of its own: after an interrupt it may still be blocked
	// in read, and its deferred terminal restore must not land on whatever file reuses fd's
	// number once the caller closes it.
	rfd, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	done := make(chan result, 1)
	go func() {
		defer unix.Close(rfd)
		b, err := term.ReadPassword(rfd)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		_ = term.Restore(fd, old)
		return nil, ctx.Err()
	}
}

// readSecretValue reads a secret's value from r, to its end, and drops one trailing
// newline ("\n" or "\r\n"). An empty value, or one over secrets.MaxValueBytes, is an
// error; no error repeats the value.
func readSecretValue(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, secrets.MaxValueBytes+3)) // + "\r\n" + 1 too many
	if err != nil {
		return "", fmt.Errorf("reading the value from stdin: %w", err)
	}
	if bytes.HasSuffix(b, []byte("\r\n")) {
		b = b[:len(b)-2]
	} else if bytes.HasSuffix(b, []byte("\n")) {
		b = b[:len(b)-1]
	}
	return checkSecretValue(b)
}

func checkSecretValue(b []byte) (string, error) {
	switch {
	case len(b) == 0:
		return "", errors.New(`the value is empty: give it on stdin, e.g. printf %s "$TOKEN" | moat secret set NAME`)
	case len(b) > secrets.MaxValueBytes:
		return "", fmt.Errorf("the value is larger than %d bytes", secrets.MaxValueBytes)
	}
	return string(b), nil
}
