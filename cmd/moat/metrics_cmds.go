package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/moatdev/moat/internal/daemon"
)

// metricsServeFlags are moat serve's /metrics flags.
type metricsServeFlags struct{ tokenFile string }

func (f *metricsServeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.tokenFile, "metrics-token", "", "file holding the bearer token Prometheus must send to scrape /metrics over TCP (--listen) from any address (at least 16 bytes, not readable by group or others); without it /metrics answers only loopback peers and the unix socket")
}

// apply reads the token file into cfg.MetricsToken.
func (f *metricsServeFlags) apply(cfg *daemon.Config) error {
	if f.tokenFile == "" {
		return nil
	}
	fi, err := os.Stat(f.tokenFile)
	if err != nil {
		return fmt.Errorf("--metrics-token: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("--metrics-token %s: not a regular file", f.tokenFile)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("--metrics-token %s: readable by group or others (mode %04o); chmod 600 it", f.tokenFile, fi.Mode().Perm())
	}
	b, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return fmt.Errorf("--metrics-token: %w", err)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) < 16 {
		return fmt.Errorf("--metrics-token %s: the token is shorter than 16 bytes", f.tokenFile)
	}
	if bytes.ContainsAny(tok, " \t\r\n") {
		return fmt.Errorf("--metrics-token %s: the token holds white space; want one line", f.tokenFile)
	}
	cfg.MetricsToken = tok
	return nil
}
