package runtime

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestArgv(t *testing.T) {
	for _, tc := range []struct {
		got, want []string
	}{
		{killOpts{all: true, signal: "KILL"}.args("id"), []string{"kill", "--all", "id", "KILL"}},
		{killOpts{signal: "TERM"}.args("id"), []string{"kill", "id", "TERM"}},
		{deleteOpts{force: true}.args("id"), []string{"delete", "--force", "id"}},
		{stateOpts{}.args("id"), []string{"state", "id"}},
		{pauseOpts{}.args("id"), []string{"pause", "id"}},
		{resumeOpts{}.args("id"), []string{"resume", "id"}},
		{listOpts{}.args(), []string{"list", "--format", "json"}},
		{runOpts{bundle: "/b"}.args("id"), []string{"run", "--bundle", "/b", "id"}},
		{globalOpts{root: "/r", extra: []string{"--debug"}}.args(), []string{"--root", "/r", "--debug"}},
		{globalOpts{root: "/r", network: "host", ociSeccomp: true, overlay2: "none"}.args(),
			[]string{"--root", "/r", "--network=host", "--oci-seccomp", "--overlay2=none"}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("argv %q, want %q", tc.got, tc.want)
		}
	}
	runc := &OCI{name: "runc", root: "/run/moat/runtime/runc"}
	if g := runc.globalArgs(); !slices.Equal(g, []string{"--root", "/run/moat/runtime/runc"}) {
		t.Errorf("runc global args %q", g)
	}
	runsc := &OCI{name: "runsc", root: "/r", ociSeccomp: true, extra: []string{"--platform=kvm"}}
	if g := runsc.globalArgs(); !slices.Equal(g, []string{"--root", "/r", "--network=host", "--oci-seccomp", "--platform=kvm"}) {
		t.Errorf("runsc global args %q", g)
	}
}

func TestCleanRuntimeError(t *testing.T) {
	for in, want := range map[string]string{
		`time="2026-11-29T10:41:14Z" level=error msg="container does not exist"` + "\n": "container does not exist",
		`time="x" level=error msg="a \"quoted\" word"`:                                  `a "quoted" word`,
		"\n  loading container: file does not exist\n\n":                                "loading container: file does not exist",
		"line one\nline two": "line one; line two",
	} {
		if got := cleanRuntimeError(in); got != want {
			t.Errorf("cleanRuntimeError(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsNotExist(t *testing.T) {
	for _, tc := range []struct {
		rt, msg string
		want    bool
	}{
		{"runc", "container does not exist", true},
		{"runc", "container not running", false},
		{"crun", "error opening file `/r/sb-1/status`: No such file or directory", true},
		{"crun", "error opening file `/other/sb-1/status`: No such file or directory", false},
		{"runsc", "loading container: file does not exist", true},
		{"runsc", `loading container "sb-1": file does not exist`, true},
		{"runsc", "starting container: exec: no such file", false},
	} {
		o := &OCI{name: tc.rt, root: "/r"}
		if got := o.isNotExist(tc.msg, "sb-1"); got != tc.want {
			t.Errorf("%s isNotExist(%q) = %v", tc.rt, tc.msg, got)
		}
	}
}

// TestUnknownContainer: Stop is idempotent, Running is false, Pause is ErrNotFound.
func TestUnknownContainer(t *testing.T) {
	for _, name := range []string{"runc", "runsc"} {
		t.Run(name, func(t *testing.T) {
			o := newDriver(t, name)
			ctx := context.Background()
			if err := o.Stop(ctx, "sb-000000000000"); err != nil {
				t.Errorf("Stop: %v", err)
			}
			if ok, err := o.Running(ctx, "sb-000000000000"); ok || err != nil {
				t.Errorf("Running = %v, %v", ok, err)
			}
			if err := o.Pause(ctx, "sb-000000000000"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Pause: %v", err)
			}
			if ids, err := o.List(ctx); err != nil || len(ids) != 0 {
				t.Errorf("List = %v, %v", ids, err)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New("docker", Options{}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New(docker): %v", err)
	}
	if _, err := New("runc", Options{Binary: "/nonexistent/runc"}, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("New with a missing binary: %v", err)
	}
}
