package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/moatdev/moat/internal/doctor"
	moatruntime "github.com/moatdev/moat/internal/runtime"
)

// runtimePaths is --runtime-path NAME=PATH (repeatable): the binary a daemon runs for a
// runtime instead of the one it would choose (moat's pinned build, else the system's).
// Each value is checked as it is given: a known runtime name and an absolute path to an
// executable file.
type runtimePaths struct{ m map[string]string }

// A SliceValue, so that serve --install writes one --runtime-path per runtime.
var _ pflag.SliceValue = (*runtimePaths)(nil)

func (r *runtimePaths) String() string { return strings.Join(r.GetSlice(), ",") }

// GetSlice is the values as given, NAME=PATH, sorted by name.
func (r *runtimePaths) GetSlice() []string {
	var kv []string
	for k, v := range r.m {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return kv
}

func (r *runtimePaths) Append(s string) error { return r.Set(s) }

func (r *runtimePaths) Replace(vals []string) error {
	old := r.m
	r.m = nil
	for _, v := range vals {
		if err := r.Set(v); err != nil {
			r.m = old
			return err
		}
	}
	return nil
}

func (r *runtimePaths) Type() string { return "NAME=PATH" }

func (r *runtimePaths) Set(s string) error {
	name, path, ok := strings.Cut(s, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("want NAME=PATH, e.g. runc=/usr/sbin/runc")
	}
	if !slices.Contains(moatruntime.Names(), name) {
		return fmt.Errorf("unknown runtime %q (want one of %s)", name, strings.Join(moatruntime.Names(), ", "))
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s: want an absolute path", path)
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("%s binary %s: %w", name, path, err)
	case !moatruntime.ExecutableFile(st):
		return fmt.Errorf("%s binary %s is not an executable file", name, path)
	}
	if _, dup := r.m[name]; dup {
		return fmt.Errorf("%s given twice", name)
	}
	if r.m == nil {
		r.m = map[string]string{}
	}
	r.m[name] = path
	return nil
}

// runtimePathFlag registers --runtime-path on a command that starts a daemon.
func (a *app) runtimePathFlag(fs *pflag.FlagSet) {
	fs.Var(&a.runtimePaths, "runtime-path", "run this binary for a runtime, NAME=PATH (e.g. runc=/usr/sbin/runc; repeatable); default: moat's pinned build in "+moatruntime.DefaultDir+" (make deps), else the system's")
}

// runtimeDetails are the doctor's lines under one runtime: its binary and build, the
// binaries passed over, its platforms (runsc), and the known security fixes it lacks.
func runtimeDetails(rt doctor.Runtime) []string {
	var out []string
	if rt.Path != "" {
		line := "binary " + rt.Path
		if rt.Build != "" {
			line += ": " + rt.Build
		}
		out = append(out, line)
	}
	for _, s := range rt.Skipped {
		out = append(out, fmt.Sprintf("passed over %s (%s build): it does not work here: %s", s.Path, s.Source, s.Reason))
	}
	if len(rt.Platforms) > 0 {
		out = append(out, "platforms "+strings.Join(rt.Platforms, ", "))
	}
	if rt.Mode != "" {
		out = append(out, "runs with "+rt.Mode)
	}
	for _, f := range rt.MissingFixes {
		out = append(out, fmt.Sprintf("MISSING FIX %s (%s): %s; fixed in %s", f.ID, f.Severity, f.What, f.FixedIn))
	}
	if len(rt.Backported) > 0 {
		out = append(out, "backported by the distribution: "+strings.Join(rt.Backported, ", "))
	}
	for _, f := range rt.Fallbacks {
		line := fmt.Sprintf("fallback %s (%s build): %s", f.Path, f.Source, f.Version)
		var ids []string
		for _, m := range f.Missing {
			ids = append(ids, m.ID)
		}
		if len(ids) > 0 {
			line += "; lacks " + strings.Join(ids, ", ")
		}
		if len(f.Backported) > 0 {
			line += " (has " + strings.Join(f.Backported, ", ") + ", backported by the distribution)"
		}
		out = append(out, line)
	}
	return out
}
