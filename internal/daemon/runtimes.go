package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/doctor"
	"github.com/moatdev/moat/internal/errdefs"
	moatruntime "github.com/moatdev/moat/internal/runtime"
	"github.com/moatdev/moat/internal/sandbox"
)

// runtimeChoice is the binary chosen for one runtime, or why there is none.
type runtimeChoice struct {
	sel moatruntime.Selection
	err error
}

// selectRuntimes starts choosing, concurrently, the binary of every runtime moat knows:
// the one RuntimePaths names, else moat's pinned build in RuntimeDir, else the system's. A
// preferred binary that is installed but fails a trivial container (moatruntime.CheckBinary)
// is passed over for the next one, with a warning. crun is not looked at on a host whose
// cgroup layout it refuses. The returned function waits for the choices.
func selectRuntimes(ctx context.Context, cfg Config, log *slog.Logger) func() map[string]runtimeChoice {
	var wg sync.WaitGroup
	var mu sync.Mutex
	out := map[string]runtimeChoice{}
	set := func(name string, c runtimeChoice) { // probes finish while the loop goes on
		mu.Lock()
		out[name] = c
		mu.Unlock()
	}
	for _, name := range moatruntime.Names() {
		if p := cfg.RuntimePaths[name]; p != "" {
			log.Info("runtime binary", "runtime", name, "path", p, "source", moatruntime.SourceConfigured)
			set(name, runtimeChoice{sel: moatruntime.Selection{Name: name, Path: p, Source: moatruntime.SourceConfigured}})
			continue
		}
		if name == "crun" {
			if why := moatruntime.CrunCgroupProblem(); why != "" {
				set(name, runtimeChoice{err: fmt.Errorf("%s: %w", why, errdefs.ErrUnavailable)})
				continue
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sel, err := moatruntime.Select(ctx, name, cfg.RuntimeDir, func(ctx context.Context, path string) error {
				return checkOncePerBoot(ctx, cfg.RunDir, name, path, moatruntime.CheckBinary)
			})
			for _, s := range sel.Skipped {
				log.Warn("runtime binary does not work on this host; using the next one (see `moat doctor`)",
					"runtime", name, "skipped", s.Path, "source", s.Source, "err", s.Reason, "using", sel.Path)
			}
			if err == nil {
				log.Info("runtime binary", "runtime", name, "path", sel.Path, "source", sel.Source)
			}
			set(name, runtimeChoice{sel: sel, err: err})
		}()
	}
	return func() map[string]runtimeChoice {
		wg.Wait()
		return out
	}
}

// checkOncePerBoot runs check on the runtime binary at path unless it passed before on this
// boot: a pass is remembered in <runDir>/runtime/<name>.works as the binary's identity
// (binaryIdentity), so daemon restarts and in-process `moat run`s do not probe again. A
// failure is not remembered: the next start checks again.
func checkOncePerBoot(ctx context.Context, runDir, name, path string, check func(ctx context.Context, name, path string) error) error {
	id, idErr := binaryIdentity(path)
	memo := filepath.Join(runDir, "runtime", name+".works")
	if idErr == nil {
		if data, err := os.ReadFile(memo); err == nil && string(data) == id {
			return nil
		}
	}
	if err := check(ctx, name, path); err != nil {
		return err
	}
	if idErr == nil && os.MkdirAll(filepath.Dir(memo), 0o700) == nil {
		tmp := memo + ".tmp"
		if os.WriteFile(tmp, []byte(id), 0o600) == nil {
			_ = os.Rename(tmp, memo)
		}
	}
	return nil
}

// binaryIdentity names one build of a binary on one boot: its path, device, inode, size,
// modification and change times, and the kernel's boot id. Any rebuild, replacement or
// reboot changes it.
func binaryIdentity(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", err
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s dev=%d ino=%d size=%d mtime=%d.%d ctime=%d.%d boot=%s", path, st.Dev, st.Ino, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, strings.TrimSpace(string(boot))), nil
}

// newRuntimes builds the driver of each runtime chosen; the others are unusable, with the
// reason.
func newRuntimes(cfg Config, choices map[string]runtimeChoice, log *slog.Logger) (map[string]sandbox.Runtime, map[string]string) {
	runtimes := map[string]sandbox.Runtime{}
	unusable := map[string]string{}
	for _, name := range moatruntime.Names() {
		c := choices[name]
		if c.err != nil {
			unusable[name] = c.err.Error()
			continue
		}
		rt, err := moatruntime.New(name, moatruntime.Options{Binary: c.sel.Path, Root: filepath.Join(cfg.RunDir, "runtime", name), WeakenCaps: cfg.TestWeaken.ExtraCaps, WeakenNoSeccomp: cfg.TestWeaken.NoSeccomp}, log)
		if err != nil {
			unusable[name] = err.Error()
			continue
		}
		runtimes[name] = rt
	}
	return runtimes, unusable
}

// ProbeRuntime is the doctor's runtime probe with the default binaries.
func ProbeRuntime(ctx context.Context, name string) doctor.Runtime {
	return ProbeRuntimeWith(nil, "")(ctx, name)
}

// ProbeRuntimeWith is the doctor's runtime probe of a daemon configured with paths
// (RuntimePaths) and dir (RuntimeDir): it reports the binary that daemon uses.
func ProbeRuntimeWith(paths map[string]string, dir string) doctor.RuntimeProber {
	return func(ctx context.Context, name string) doctor.Runtime {
		p := moatruntime.ProbeWith(ctx, name, moatruntime.ProbeOptions{Binary: paths[name], Dir: dir})
		r := doctor.Runtime{Name: name, Path: p.Path, Version: p.Version, Usable: p.Works,
			Isolation: sandbox.TraitsOf(name).Isolation, Problem: p.Err, Fix: p.Hint,
			Source: p.Source, Stamp: p.Stamp, Pinned: moatruntime.Pinned(name),
			MissingFixes: p.Missing, Backported: p.Backported, Platforms: p.Platforms, Mode: p.Mode, Skipped: p.Skipped, Fallbacks: p.Fallbacks}
		if p.ParseErr == "" && p.Version != "" {
			r.Release = p.Parsed.String()
		}
		r.Build = doctor.BuildNote(name, r.Source, r.Stamp, r.Pinned, dir)
		return r
	}
}

// CheckRuntimePaths rejects RuntimePaths entries for unknown runtimes or without an
// executable file.
func CheckRuntimePaths(paths map[string]string) error {
	for name, p := range paths {
		if !slices.Contains(moatruntime.Names(), name) {
			return fmt.Errorf("runtime path for %q: unknown runtime (want one of runc, crun, runsc): %w", name, errdefs.ErrInvalidArgument)
		}
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("runtime path for %s: %w", name, err)
		}
		if !moatruntime.ExecutableFile(st) {
			return fmt.Errorf("runtime path for %s: %s is not an executable file: %w", name, p, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
