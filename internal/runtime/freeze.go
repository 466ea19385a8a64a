package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Pause and Resume freeze and thaw the container's cgroup themselves, as `runc pause` does,
// without a runtime process: a thaw is one write (about 5 ms here against 60–200 ms for
// `runsc resume`, which also pauses gVisor's kernel inside the sandbox instead of freezing
// its processes). The frozen cgroup is then the truth about the container: runc reads its
// state from it, and runsc — which cannot answer while its processes are frozen — is not
// asked (state answers "paused" from the cgroup).
//
// Except under a current runsc (systrap): a sandbox frozen through its cgroup for a second
// or two sometimes lost its init at the thaw (the whole sandbox ended; no panic, no seccomp
// kill; 2 of 3 runs of 25 idle freeze-and-exec rounds in the daemon, none of 75 with `runsc
// pause`), so it is paused by gVisor itself, which stops its kernel's tasks cleanly
// (pauseByCgroup).

// freezeWait bounds how long a freeze may stay FREEZING before it is given up.
const freezeWait = 2 * time.Second

// freezer is a container's freezer control: cgroup v1's freezer.state or v2's cgroup.freeze.
type freezer struct {
	file string
	v2   bool
}

// freezerOf returns container id's freezer (cgroupsPath /moat/<id>, as BuildSpec sets) and
// whether it exists.
func freezerOf(id string) (freezer, bool) {
	f := freezer{file: filepath.Join(cgroupRoot, "freezer", "moat", id, "freezer.state")}
	if DetectCgroupMode() == CgroupUnified {
		f = freezer{file: filepath.Join(cgroupRoot, "moat", id, "cgroup.freeze"), v2: true}
	}
	_, err := os.Stat(f.file)
	return f, err == nil
}

// frozen says whether the cgroup is frozen (v1: FROZEN or FREEZING).
func (f freezer) frozen() (bool, error) {
	data, err := os.ReadFile(f.file)
	if err != nil {
		return false, err
	}
	s := strings.TrimSpace(string(data))
	if f.v2 {
		return s == "1", nil
	}
	return s != "THAWED", nil
}

// freeze freezes the cgroup and waits until every process is frozen. cgroup v1 can stay
// FREEZING while processes fork: the write is repeated, as runc does, and after freezeWait
// the cgroup is thawed again and the freeze fails.
func (f freezer) freeze() error {
	if f.v2 {
		if err := os.WriteFile(f.file, []byte("1"), 0); err != nil {
			return fmt.Errorf("freezing: %w", err)
		}
		events := filepath.Join(filepath.Dir(f.file), "cgroup.events")
		for deadline := time.Now().Add(freezeWait); ; time.Sleep(time.Millisecond) {
			data, err := os.ReadFile(events)
			if err != nil || strings.Contains(string(data), "frozen 1") {
				return nil
			}
			if time.Now().After(deadline) {
				_ = f.thaw()
				return fmt.Errorf("the cgroup did not freeze within %s: %w", freezeWait, errdefs.ErrUnavailable)
			}
		}
	}
	for deadline := time.Now().Add(freezeWait); ; {
		if err := os.WriteFile(f.file, []byte("FROZEN"), 0); err != nil {
			return fmt.Errorf("freezing: %w", err)
		}
		for range 10 {
			data, err := os.ReadFile(f.file)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(data)) == "FROZEN" {
				return nil
			}
			time.Sleep(time.Millisecond)
		}
		if time.Now().After(deadline) {
			_ = f.thaw()
			return fmt.Errorf("the cgroup stayed FREEZING for %s (processes keep forking): %w", freezeWait, errdefs.ErrUnavailable)
		}
	}
}

// thaw thaws the cgroup.
func (f freezer) thaw() error {
	v := "THAWED"
	if f.v2 {
		v = "0"
	}
	if err := os.WriteFile(f.file, []byte(v), 0); err != nil {
		return fmt.Errorf("thawing: %w", err)
	}
	return nil
}
