package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "Store a secret, reading its value from stdin",
		Long: `set stores a secret under NAME (upper-case letters, digits and underscores), replacing
any value it had. The value is read from stdin, never from the command line: typed at a
hidden prompt when stdin is a terminal, else piped, e.g.

  printf %s "$GITHUB_TOKEN" | moat secret set GITHUB_TOKEN

One trailing newline is dropped. Values are 1 byte to 64 KiB.

With --github-app, the value is a GitHub App's private key (PEM) and the secret stands for
the App's installation: moat mints short-lived installation tokens from it for each
sandbox that binds it with --github-token, limited to that sandbox's --github-repo and
--github-permission, and revokes them when the sandbox stops:

  moat secret set GITHUB_TOKEN --github-app 123456 --installation 7890 < app.private-key.pem`,
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
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			value, err := readSecret(cmd.Context(), name, os.Stdin, os.Stderr)
			if err != nil {
				return err
			}
			if ghApp.AppID != "" {
				return c.SetGitHubApp(cmd.Context(), name, value, ghApp)
			}
			return c.SetSecret(cmd.Context(), name, value)
		},
	}
	set.Flags().StringVar(&ghApp.AppID, "github-app", "", "the value is this GitHub App's private key (App ID or client ID)")
	set.Flags().Int64Var(&ghApp.InstallationID, "installation", 0, "the App installation tokens are minted for (with --github-app)")
	set.Flags().StringVar(&ghApp.APIURL, "github-api", "", "GitHub REST API base (default https://api.github.com; GitHub Enterprise: https://HOST/api/v3)")
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List secrets: names, kinds, dates and the sandboxes that bind them (never values)",
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
			fmt.Fprintln(tw, "NAME\tKIND\tCREATED\tUPDATED\tBOUND IN")
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", termSafe(s.Name), termSafe(kind), s.Created.Local().Format("2006-01-02 15:04:05"), s.Updated.Local().Format("2006-01-02 15:04:05"), termSafe(bound))
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
	cmd.AddCommand(set, ls, rm)
	return cmd
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
