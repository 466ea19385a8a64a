package main

import (
	"fmt"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
)

// maxFlags are --max-memory, --max-cpus, --max-pids and --max-disk: maxima of sandbox
// limits (an API key's, or the daemon's with the --max-io-* flags).
type maxFlags struct {
	memory, disk string
	cpus         float64
	pids         int64
}

func (f *maxFlags) register(cmd *cobra.Command, whose string) {
	fl := cmd.Flags()
	fl.StringVar(&f.memory, "max-memory", "", "largest memory limit of "+whose+", e.g. 4G (0: none)")
	fl.Float64Var(&f.cpus, "max-cpus", 0, "largest CPU limit of "+whose+" in cores (0: none)")
	fl.Int64Var(&f.pids, "max-pids", 0, "largest pids limit of "+whose+" (0: none)")
	fl.StringVar(&f.disk, "max-disk", "", "largest drive of "+whose+", e.g. 20G (0: none)")
}

// maxima returns the flags' values; those not given on cmd's command line are taken from
// base.
func (f *maxFlags) maxima(cmd *cobra.Command, base v1.KeyMaxima) (v1.KeyMaxima, error) {
	m := base
	var err error
	changed := cmd.Flags().Changed
	if changed("max-memory") {
		if m.MemoryBytes, err = parseSize(f.memory); err != nil {
			return m, fmt.Errorf("--max-memory: %w", err)
		}
	}
	if changed("max-disk") {
		if m.DiskBytes, err = parseSize(f.disk); err != nil {
			return m, fmt.Errorf("--max-disk: %w", err)
		}
	}
	if changed("max-cpus") {
		if f.cpus < 0 {
			return m, fmt.Errorf("--max-cpus %g: must be positive, or 0 for none", f.cpus)
		}
		m.CPUs = f.cpus
	}
	if changed("max-pids") {
		if f.pids < 0 {
			return m, fmt.Errorf("--max-pids %d: must be positive, or 0 for none", f.pids)
		}
		m.Pids = f.pids
	}
	return m, nil
}

// maximaText renders an API key's maxima for `moat apikey ls`.
func maximaText(m v1.KeyMaxima) string {
	var out string
	add := func(s string) {
		if out != "" {
			out += ","
		}
		out += s
	}
	if m.CPUs > 0 {
		add(fmt.Sprintf("cpus=%g", m.CPUs))
	}
	if m.MemoryBytes > 0 {
		add("memory=" + humanBytes(m.MemoryBytes))
	}
	if m.Pids > 0 {
		add(fmt.Sprintf("pids=%d", m.Pids))
	}
	if m.DiskBytes > 0 {
		add("disk=" + humanBytes(m.DiskBytes))
	}
	if out == "" {
		return "no maxima of its own"
	}
	return "max " + out
}
