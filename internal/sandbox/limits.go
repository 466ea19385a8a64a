package sandbox

import (
	"fmt"
	"math"
	"strconv"

	"github.com/moatdev/moat/internal/errdefs"
)

// Capacity is what this host has, as far as one sandbox's limits are concerned. The
// daemon reads it once at start (internal/daemon); zero fields are unknown and bound
// nothing.
type Capacity struct {
	CPUs        int   // online CPUs
	MemoryBytes int64 // MemTotal
	Pids        int64 // min(kernel.pid_max, kernel.threads-max)
	FileMax     int64 // fs.file-max: struct files the kernel hands out to unprivileged tasks
	DiskBytes   int64 // size of the data filesystem that holds the drives
}

// BuiltinLimits are a new sandbox's limits when neither it nor the daemon's configuration
// says otherwise (then lowered to the host's and the operator's maxima): the one place they
// are defined. Nofile has no default: it follows from pids and the file budget. The drive
// throttle (16 MiB/s and 400 requests/s, reads and writes each) is the highest measured here
// that kept a peer's fsync p90 at its level alone next to a neighbour writing with O_DSYNC
// (TestNoisyNeighbourIO: 0.55× alone, unthrottled 8×; 32 MiB/s and 400: 1.8×; 64 MiB/s and
// 1000: 4.7×).
func BuiltinLimits() Limits {
	return Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 1024, DiskBytes: 10 << 30, IOBps: 16 << 20, IOIops: 400}
}

// HostShare is the part of the host's pids and open files (1/HostShare) that one sandbox
// may take at most, so that no single sandbox exhausts them for the host and its peers.
const HostShare = 4

// Open files per process (RLIMIT_NOFILE, hard = soft) of a sandbox, when it does not ask:
// as many as its file budget allows for its pids, at most DefaultNofile; never fewer than
// MinNofile (a process that cannot open MinNofile files breaks ordinary tools). A default
// pids is lowered (to no fewer than usualPids) before a process gets fewer than UsualNofile,
// the usual soft limit of Linux that programs assume; agents need open files more than
// hundreds of processes.
const (
	DefaultNofile = 65536
	UsualNofile   = 1024
	MinNofile     = 256
	usualPids     = 256
)

// Ceilings are the upper bounds a sandbox's limits must stay within: the host's, the
// daemon's configured maxima, and the maxima of the API key that asks (none for the
// operator on the unix socket). Zero fields of Daemon and Key bound nothing.
type Ceilings struct {
	Host   Capacity
	Daemon Limits
	Key    Limits
	KeyID  string // names the key in messages
	// FileBudget is the most open files (struct file) one sandbox's processes may hold
	// together (0: Host.FileMax/HostShare).
	FileBudget int64
	// IODefaults are the daemon's default drive throttle. An API key's sandbox may not
	// ask for more (a looser throttle takes I/O from its peers) unless the operator set
	// the daemon's IO maxima; the operator on the unix socket may.
	IODefaults Limits
}

// fileBudget is c.FileBudget or the host's share of fs.file-max; 0 when unknown.
func (c Ceilings) fileBudget() int64 {
	if c.FileBudget > 0 {
		return c.FileBudget
	}
	return c.Host.FileMax / HostShare
}

// limitCap is one upper bound and what to call it in an error.
type limitCap struct {
	value float64
	by    string // "this host's 2 CPUs", "the daemon's maximum of 4", ...
}

// lowest returns the smallest non-zero bound, and false when there is none.
func lowest(caps ...limitCap) (limitCap, bool) {
	var best limitCap
	ok := false
	for _, c := range caps {
		if c.value > 0 && (!ok || c.value < best.value) {
			best, ok = c, true
		}
	}
	return best, ok
}

// EffectiveLimits returns the limits a sandbox runs with: req, its zero fields taken from
// defaults, each within ceilings c, and Nofile chosen so that Pids × Nofile (the most open
// files the sandbox's processes can hold) stays within c's file budget.
//
// A value the caller asked for that exceeds a ceiling is refused (ErrInvalidArgument naming
// the limit, the value and the ceiling): silently running with less than was asked would
// surprise a caller who sized the work to it. A default that exceeds a ceiling is lowered to
// it: the caller asked for nothing. Values below the minimums a sandbox needs are refused.
// It is pure; tests table it.
func EffectiveLimits(req, defaults Limits, c Ceilings) (Limits, error) {
	out := req
	keyMax := func(what string) string {
		return fmt.Sprintf("API key %s's maximum of %s", c.KeyID, what)
	}
	// An API key's sandbox keeps at least the default drive throttle unless the daemon
	// has an IO maximum of its own.
	keyIODefault := func(def, daemonMax int64) float64 {
		if c.KeyID == "" || daemonMax > 0 {
			return 0
		}
		return float64(def)
	}
	keyIOText := func(def, flag string) string {
		return fmt.Sprintf("the daemon's default of %s, which API key %s's sandboxes may not exceed without the daemon's %s", def, c.KeyID, flag)
	}
	type field struct {
		name   string
		val    *float64
		asked  bool
		def    float64
		caps   []limitCap
		render func(float64) string
	}
	bytesOf := func(v float64) string { return formatBytes(int64(v)) }
	count := func(v float64) string { return strconv.FormatInt(int64(v), 10) }
	cpus := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

	mem, cpu, pids, disk := float64(req.MemoryBytes), req.CPUs, float64(req.Pids), float64(req.DiskBytes)
	nofile, bps, iops := float64(req.Nofile), float64(req.IOBps), float64(req.IOIops)
	hostPids := float64(c.Host.Pids / HostShare)
	fields := []field{
		{"memory", &mem, req.MemoryBytes != 0, float64(defaults.MemoryBytes), []limitCap{
			{float64(c.Host.MemoryBytes), "this host's " + formatBytes(c.Host.MemoryBytes) + " of memory"},
			{float64(c.Daemon.MemoryBytes), "the daemon's maximum of " + formatBytes(c.Daemon.MemoryBytes)},
			{float64(c.Key.MemoryBytes), keyMax(formatBytes(c.Key.MemoryBytes))},
		}, bytesOf},
		{"cpus", &cpu, req.CPUs != 0, defaults.CPUs, []limitCap{
			{float64(c.Host.CPUs), fmt.Sprintf("this host's %d CPUs", c.Host.CPUs)},
			{c.Daemon.CPUs, "the daemon's maximum of " + cpus(c.Daemon.CPUs)},
			{c.Key.CPUs, keyMax(cpus(c.Key.CPUs))},
		}, cpus},
		{"pids", &pids, req.Pids != 0, float64(defaults.Pids), []limitCap{
			{hostPids, fmt.Sprintf("this host's share of %d (1/%d of its %d pids)", int64(hostPids), HostShare, c.Host.Pids)},
			{float64(c.Daemon.Pids), "the daemon's maximum of " + count(float64(c.Daemon.Pids))},
			{float64(c.Key.Pids), keyMax(count(float64(c.Key.Pids)))},
		}, count},
		{"disk", &disk, req.DiskBytes != 0, float64(defaults.DiskBytes), []limitCap{
			{float64(c.Host.DiskBytes), "the data filesystem's size of " + formatBytes(c.Host.DiskBytes)},
			{float64(c.Daemon.DiskBytes), "the daemon's maximum of " + formatBytes(c.Daemon.DiskBytes)},
			{float64(c.Key.DiskBytes), keyMax(formatBytes(c.Key.DiskBytes))},
		}, bytesOf},
		{"nofile", &nofile, req.Nofile != 0, 0, []limitCap{
			{float64(c.Daemon.Nofile), "the daemon's maximum of " + count(float64(c.Daemon.Nofile))},
			{float64(c.Key.Nofile), keyMax(count(float64(c.Key.Nofile)))},
		}, count},
		{"io_bps", &bps, req.IOBps != 0, float64(defaults.IOBps), []limitCap{
			{float64(c.Daemon.IOBps), "the daemon's maximum of " + count(float64(c.Daemon.IOBps))},
			{float64(c.Key.IOBps), keyMax(count(float64(c.Key.IOBps)))},
			{keyIODefault(c.IODefaults.IOBps, c.Daemon.IOBps), keyIOText(count(float64(c.IODefaults.IOBps)), "--max-io-bps")},
		}, count},
		{"io_iops", &iops, req.IOIops != 0, float64(defaults.IOIops), []limitCap{
			{float64(c.Daemon.IOIops), "the daemon's maximum of " + count(float64(c.Daemon.IOIops))},
			{float64(c.Key.IOIops), keyMax(count(float64(c.Key.IOIops)))},
			{keyIODefault(c.IODefaults.IOIops, c.Daemon.IOIops), keyIOText(count(float64(c.IODefaults.IOIops)), "--max-io-iops")},
		}, count},
	}
	for _, f := range fields {
		if math.IsNaN(*f.val) || math.IsInf(*f.val, 0) || *f.val < 0 {
			return Limits{}, fmt.Errorf("%s %s is not a valid limit: %w", f.name, f.render(*f.val), errdefs.ErrInvalidArgument)
		}
		if !f.asked {
			*f.val = f.def
		}
		bound, ok := lowest(f.caps...)
		if !ok || *f.val <= bound.value {
			continue
		}
		if f.asked {
			return Limits{}, fmt.Errorf("%s %s exceeds %s: %w", f.name, f.render(*f.val), bound.by, errdefs.ErrInvalidArgument)
		}
		*f.val = bound.value
	}
	out.MemoryBytes, out.CPUs, out.Pids, out.DiskBytes = int64(mem), cpu, int64(pids), int64(disk)
	out.Nofile, out.IOBps, out.IOIops = int64(nofile), int64(bps), int64(iops)
	if err := out.checkMinimums(); err != nil {
		return Limits{}, err
	}
	if err := fitFiles(&out, req, c); err != nil {
		return Limits{}, err
	}
	return out, nil
}

// fitFiles chooses l.Nofile (when req has none) so that l.Pids × l.Nofile stays within the
// file budget; a default pids is lowered to fit an asked nofile, asked values that cannot
// fit are refused.
func fitFiles(l *Limits, req Limits, c Ceilings) error {
	budget := c.fileBudget()
	if budget <= 0 { // fs.file-max unknown: only the fixed default applies
		if l.Nofile == 0 {
			l.Nofile = DefaultNofile
		}
		return nil
	}
	what := fmt.Sprintf("this sandbox's open-file budget of %d (pids × nofile", budget)
	if c.FileBudget > 0 {
		what += ", the daemon's maximum)"
	} else {
		what += fmt.Sprintf(", 1/%d of fs.file-max %d)", HostShare, c.Host.FileMax)
	}
	if req.Nofile == 0 {
		if req.Pids == 0 && l.Pids*UsualNofile > budget {
			l.Pids = budget / UsualNofile
			if l.Pids < usualPids {
				l.Pids = min(usualPids, budget/MinNofile)
			}
			if err := l.checkMinimums(); err != nil {
				return fmt.Errorf("%w (the file budget of %d allows no more)", err, budget)
			}
		}
		l.Nofile = min(DefaultNofile, budget/l.Pids)
		if c := lowestInt(c.Daemon.Nofile, c.Key.Nofile); c > 0 {
			l.Nofile = min(l.Nofile, c)
		}
		if l.Nofile < MinNofile {
			return fmt.Errorf("pids %d leaves each process fewer than %d open files within %s; ask for fewer pids: %w",
				l.Pids, MinNofile, what, errdefs.ErrInvalidArgument)
		}
		return nil
	}
	if l.Pids*l.Nofile <= budget {
		return nil
	}
	if req.Pids == 0 && budget/l.Nofile >= 16 {
		l.Pids = budget / l.Nofile
		return nil
	}
	return fmt.Errorf("pids %d × nofile %d = %d exceeds %s; ask for fewer pids or a lower nofile: %w",
		l.Pids, l.Nofile, l.Pids*l.Nofile, what, errdefs.ErrInvalidArgument)
}

// lowestInt is the smallest positive value, 0 when there is none.
func lowestInt(vs ...int64) int64 {
	var out int64
	for _, v := range vs {
		if v > 0 && (out == 0 || v < out) {
			out = v
		}
	}
	return out
}

// checkMinimums refuses limits a sandbox cannot run with.
func (l Limits) checkMinimums() error {
	switch {
	case l.MemoryBytes < 32<<20:
		return fmt.Errorf("memory limit %d bytes is below the 32 MiB minimum: %w", l.MemoryBytes, errdefs.ErrInvalidArgument)
	case l.CPUs < 0.01:
		return fmt.Errorf("cpus %g is below the minimum of 0.01: %w", l.CPUs, errdefs.ErrInvalidArgument)
	case l.Pids < 16:
		return fmt.Errorf("pids limit %d is below the minimum of 16: %w", l.Pids, errdefs.ErrInvalidArgument)
	case l.DiskBytes < 64<<20:
		return fmt.Errorf("disk limit %d bytes is below the 64 MiB minimum: %w", l.DiskBytes, errdefs.ErrInvalidArgument)
	case l.Nofile != 0 && l.Nofile < MinNofile:
		return fmt.Errorf("nofile %d is below the minimum of %d: %w", l.Nofile, MinNofile, errdefs.ErrInvalidArgument)
	case l.IOBps != 0 && l.IOBps < 1<<20:
		return fmt.Errorf("io_bps %d is below the minimum of 1 MiB/s: %w", l.IOBps, errdefs.ErrInvalidArgument)
	case l.IOIops != 0 && l.IOIops < 16:
		return fmt.Errorf("io_iops %d is below the minimum of 16: %w", l.IOIops, errdefs.ErrInvalidArgument)
	}
	return nil
}

// formatBytes renders n in the largest binary unit that divides it (e.g. "4 GiB"), or
// rounded to a tenth of the largest unit below it (e.g. "23.5 GiB").
func formatBytes(n int64) string {
	for _, u := range []struct {
		shift int
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	for _, u := range []struct {
		shift int
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}} {
		if n >= 1<<u.shift {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(int64(1)<<u.shift), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
