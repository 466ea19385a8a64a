package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/sdk"
)

// previewServeFlags are moat serve's port preview flags.
type previewServeFlags struct {
	domain      string
	allowPublic bool
}

func (f *previewServeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.domain, "preview-domain", "", "`DOMAIN` of host-based port previews, http://<port>-<sandbox-id>.DOMAIN/ (wildcard DNS *.DOMAIN to this daemon's --listen address; may end in :PORT, e.g. preview.localhost:7070); also the domain E2B SDKs' getHost(port) uses. Path-based previews (/preview/<sandbox-id>/<port>/) work without it")
	cmd.Flags().BoolVar(&f.allowPublic, "allow-public-ports", false, "let sandbox owners make ports public (moat port open --visibility public): reachable by anyone who can reach the daemon, without key or token")
}

// apply puts the flags into cfg.
func (f *previewServeFlags) apply(cfg *daemon.Config) error {
	d := strings.TrimSuffix(strings.ToLower(f.domain), ".")
	if strings.ContainsAny(d, "/@ ") || strings.HasPrefix(d, ".") || strings.HasPrefix(d, "*") {
		return fmt.Errorf("--preview-domain %q: want a DNS name with an optional :port, e.g. preview.example.com", f.domain)
	}
	cfg.Previews = daemon.PreviewsConfig{Domain: d, AllowPublic: f.allowPublic}
	return nil
}

// portCmd is `moat port ls/open/close`.
func (a *app) portCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "port",
		Short: "Port previews: reach a port a sandbox's process listens on (docs/previews.md)",
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls SANDBOX",
		Short: "List a sandbox's listening and opened ports with their preview URLs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Ports(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []v1.Port{}
				}
				return printJSON(list)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PORT\tLISTENING\tVISIBILITY\tURL")
			for _, p := range list {
				fmt.Fprintf(tw, "%d\t%v\t%s\t%s\n", p.Port, p.Listening, termSafe(p.Visibility), termSafe(a.previewURL(p)))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var visibility string
	open := &cobra.Command{
		Use:   "open SANDBOX PORT",
		Short: "Open a port for previews: token (default; prints the token), public (if the daemon allows), or private",
		Args:  cobra.ExactArgs(2),
		RunE: a.portChange(func(c *sdk.Client, ctx context.Context, id string, port int) (v1.Port, error) {
			return c.SetPort(ctx, id, port, visibility)
		}),
	}
	open.Flags().StringVar(&visibility, "visibility", v1.PortToken, "token, public or private")
	closeCmd := &cobra.Command{
		Use:   "close SANDBOX PORT",
		Short: "Make a port private again (its token stops working)",
		Args:  cobra.ExactArgs(2),
		RunE:  a.portChange((*sdk.Client).ClosePort),
	}
	cmd.AddCommand(ls, open, closeCmd)
	return cmd
}

// previewURL is the URL to print for a port: the host-based one, else the path-based one
// on --host's address (relative on the unix socket, which serves it too).
func (a *app) previewURL(p v1.Port) string {
	if p.URL != "" {
		return p.URL
	}
	if h := strings.TrimSuffix(a.hostURL(), "/"); h != "" {
		return h + p.PathURL
	}
	return p.PathURL
}

func (a *app) printPort(p v1.Port) {
	fmt.Printf("port %d: %s\n", p.Port, p.Visibility)
	if p.URL != "" {
		fmt.Printf("url:  %s\n", termSafe(p.URL))
	}
	path := p.PathURL
	if h := strings.TrimSuffix(a.hostURL(), "/"); h != "" {
		path = h + path
	}
	fmt.Printf("path: %s\n", termSafe(path))
	if p.Token != "" {
		fmt.Printf("token: %s\n", p.Token)
		fmt.Printf("  (send it as the header X-Moat-Preview-Token, or add ?moat_preview_token=<token> to the URL)\n")
	}
}

// portChange is the RunE of `moat port open|close SANDBOX PORT`: it parses the port, calls
// change and prints the port as it is now.
func (a *app) portChange(change func(c *sdk.Client, ctx context.Context, id string, port int) (v1.Port, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		port, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("port %q: want a number 1-65535", args[1])
		}
		c, err := a.connect(cmd.Context())
		if err != nil {
			return err
		}
		p, err := change(c, cmd.Context(), args[0], port)
		if err != nil {
			return err
		}
		a.printPort(p)
		return nil
	}
}
