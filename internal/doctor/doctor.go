// Package doctor inspects the host: which OCI runtimes exist and work, which kernel features
// moat relies on are present, which isolation levels that gives, and the exact package or
// setting that would add more. It only reads and probes; it changes nothing lasting.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/netns"
	"github.com/moatdev/moat/internal/runtime"
)

// Check is one finding.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Runtime is the finding for one OCI runtime.
type Runtime struct {
	Name      string `json:"name"`
	Path      string `json:"path,omitempty"`
	Version   string `json:"version,omitempty"`
	Usable    bool   `json:"usable"`
	Isolation string `json:"isolation"`
	Problem   string `json:"problem,omitempty"`
	Fix       string `json:"fix,omitempty"`
	// Which binary, and how current it is (runtimes.go).
	Source       string               `json:"source,omitempty"`  // "moat" (its pinned build), "system", "configured"
	Stamp        string               `json:"stamp,omitempty"`   // source moat: the version the build was stamped with
	Pinned       string               `json:"pinned,omitempty"`  // the version moat pins for this runtime
	Build        string               `json:"build,omitempty"`   // the above, in words
	Release      string               `json:"release,omitempty"` // the version parsed: "1.5.3", runsc: its build day
	MissingFixes []runtime.MissingFix `json:"missing_fixes,omitempty"`
	Backported   []string             `json:"backported,omitempty"` // fixes its version lacks that the distribution patched in
	Platforms    []string             `json:"platforms,omitempty"`  // runsc: the platforms this build offers
	Mode         string               `json:"mode,omitempty"`       // runsc: how moat runs it (platform, network, identity)
	Skipped      []runtime.Skipped    `json:"skipped,omitempty"`    // preferred binaries passed over: they do not work here
	Fallbacks    []runtime.Fallback   `json:"fallbacks,omitempty"`  // installed binaries it would fall back to
}

// Level is an isolation level and whether this host can give it.
type Level struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Detail    string `json:"detail"`
	Fix       string `json:"fix,omitempty"`
}

// Report is the whole diagnosis. OK is true when at least one runtime works.
type Report struct {
	Runtimes  []Runtime `json:"runtimes"`
	Kernel    []Check   `json:"kernel"`
	Tools     []Check   `json:"tools"`
	Isolation []Level   `json:"isolation"`
	// Storage is about the daemon's data filesystem (filled in by the daemon).
	Storage []Check `json:"storage,omitempty"`
	OK      bool    `json:"ok"`
	// KVM is the kind of KVM this host has and what it allows (kvm.go).
	KVM *KVM `json:"kvm,omitempty"`
}

// DataFS is what the daemon measured of its data filesystem for DataFilesystem.
type DataFS struct {
	FS                      string
	Free, Promised, Reserve int64 // bytes (storage.Space)
	DefaultDisk             int64 // the default drive's size
	Fits                    int64 // more default sandboxes admitted; -1: any (overcommitting)
	Size                    func(int64) string
}

// DataFilesystem reports how many sandboxes with the default drive the data filesystem
// still admits: free, less what is promised to drives and the reserve. Pure.
func DataFilesystem(d DataFS) Check {
	c := Check{Name: "data filesystem", OK: d.Fits != 0}
	if d.Fits < 0 {
		c.Detail = fmt.Sprintf("%s: %s free, %s reserved for the database and logs; drives are overcommitted (--disk-overcommit) and take space as sandboxes write",
			d.FS, d.Size(d.Free), d.Size(d.Reserve))
		return c
	}
	c.Detail = fmt.Sprintf("%s: %s free, %s of it promised to drives, %s reserved for the database and logs: room for %d more sandboxes with the default %s drive",
		d.FS, d.Size(d.Free), d.Size(d.Promised), d.Size(d.Reserve), d.Fits, d.Size(d.DefaultDisk))
	if d.Fits == 0 {
		c.Fix = "creates with the default drive are refused (429): delete sandboxes or templates, enlarge the filesystem, or lower --default-disk"
	}
	return c
}

// RuntimeProber probes one runtime by name. Implemented with internal/runtime.
type RuntimeProber func(ctx context.Context, name string) Runtime

// Run diagnoses the host.
func Run(ctx context.Context, probe RuntimeProber) Report {
	var r Report
	for _, name := range []string{"runc", "crun", "runsc"} {
		rt := probe(ctx, name)
		r.Runtimes = append(r.Runtimes, rt)
		if rt.Usable {
			r.OK = true
		}
	}
	kvm := ClassifyKVM(ReadKVMFacts("/"))
	r.KVM = &kvm
	r.Kernel = kernelChecks(kvm)
	r.Tools = toolChecks()
	r.Isolation = levels(r)
	return r
}

func kernelChecks(kvm KVM) []Check {
	var out []Check
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	out = append(out, Check{Name: "kernel", OK: true, Detail: unix.ByteSliceToString(uts.Release[:])})

	n, _ := linux.ReadCount("/proc/sys/user/max_user_namespaces")
	out = append(out, Check{Name: "user namespaces", OK: n > 0,
		Detail: fmt.Sprintf("user.max_user_namespaces = %d", n),
		Fix:    "sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d)"})

	fs, _ := os.ReadFile("/proc/filesystems")
	out = append(out, Check{Name: "overlayfs", OK: strings.Contains(string(fs), "\toverlay\n"),
		Detail: "needed for sandbox root filesystems", Fix: "modprobe overlay"})

	out = append(out, idmapCheck())

	ownErr := linux.ProbeOwnerRange(os.TempDir())
	ownDetail := "each sandbox's user namespace belongs to its own host uid: its inotify instances, POSIX message queues and other per-user kernel counters have a budget of their own"
	if ownErr != nil {
		ownDetail = "sandboxes and host root share one budget of per-user kernel limits (inotify instances, POSIX message queues): one sandbox can exhaust them for all — " + ownErr.Error()
	}
	out = append(out, Check{Name: "per-sandbox kernel limits", OK: ownErr == nil, Detail: ownDetail,
		Fix: "apt-get install util-linux (unshare), and allow root to create user namespaces for other uids (user.max_user_namespaces > 0, no LSM denying it)"})

	fwDetail := "the gateway firewall (nf_tables: NAT redirect, conntrack) installs in a test namespace"
	fwErr := netns.ProbeFirewall(os.TempDir())
	if fwErr != nil {
		fwDetail = "cannot install the gateway firewall: " + fwErr.Error()
	}
	out = append(out, Check{Name: "nftables", OK: fwErr == nil, Detail: fwDetail,
		Fix: "a kernel with nf_tables, nft_nat, nft_redir and nf_conntrack (modprobe nf_tables nft_redir); without it no sandbox can start"})

	out = append(out, cgroupCheck()...)

	out = append(out, kvmCheck(kvm))

	abi, err := landlockABI()
	out = append(out, Check{Name: "Landlock", OK: err == nil && abi > 0,
		Detail: map[bool]string{true: fmt.Sprintf("ABI %d", abi), false: fmt.Sprintf("unavailable: %v", err)}[err == nil],
		Fix:    "boot with lsm=landlock,… (CONFIG_SECURITY_LANDLOCK=y)"})

	avail, _ := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	out = append(out, Check{Name: "seccomp", OK: len(avail) > 0, Detail: strings.TrimSpace(string(avail)),
		Fix: "a kernel with CONFIG_SECCOMP_FILTER=y"})

	_, loopErr := os.Stat("/dev/loop-control")
	out = append(out, Check{Name: "loop devices", OK: loopErr == nil, Detail: "sandbox drives are ext4 images on loop devices (disk limits)",
		Fix: "modprobe loop"})
	return out
}

// idmapCheck attempts a real idmapped mount of an empty directory.
func idmapCheck() Check {
	c := Check{Name: "idmapped mounts", Detail: "template layers are mapped into each sandbox's own uid range",
		Fix: "a kernel ≥ 5.19 with overlayfs on idmapped layers"}
	dir, err := os.MkdirTemp("", "moat-doctor-")
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	defer os.RemoveAll(dir)
	files := linux.NamespaceFiles{User: filepath.Join(dir, "userns"), Net: filepath.Join(dir, "netns")}
	if err := linux.CreateUserAndNetNS(files, linux.IDRange{Host: 0x7ffe0000, Size: 65536}, linux.OwnerRoot); err != nil {
		c.Detail = "creating a user namespace: " + err.Error()
		return c
	}
	defer linux.UnmountFile(files.Net)
	defer linux.UnmountFile(files.User)
	src := filepath.Join(dir, "src")
	dst := filepath.Join(dir, "dst")
	_ = os.Mkdir(src, 0o755)
	if err := linux.IDMapMount(src, dst, files.User); err != nil {
		c.Detail = err.Error()
		return c
	}
	_ = unix.Unmount(dst, unix.MNT_DETACH)
	c.OK = true
	return c
}

func cgroupCheck() []Check {
	mode := runtime.DetectCgroupMode()
	switch mode {
	case runtime.CgroupUnknown:
		return []Check{{Name: "cgroups", Detail: "no cgroup filesystem at /sys/fs/cgroup"}}
	case runtime.CgroupUnified:
		return []Check{{Name: "cgroups", OK: true, Detail: mode.String()}}
	}
	out := []Check{{Name: "cgroups", OK: true, Detail: mode.String(),
		Fix: "boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2 (crun needs it on this host)"}}
	_, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	out = append(out, Check{Name: "memory+swap accounting", OK: err == nil || noSwap(),
		Detail: map[bool]string{true: "swap cannot extend a sandbox's memory limit", false: "memsw unavailable and swap is on: sandboxes could swap past their memory limit"}[err == nil || noSwap()],
		Fix:    "boot with swapaccount=1, or run without swap"})
	return out
}

func noSwap() bool {
	data, _ := os.ReadFile("/proc/swaps")
	return len(strings.Split(strings.TrimSpace(string(data)), "\n")) <= 1
}

func toolChecks() []Check {
	var out []Check
	for _, t := range []struct{ name, why, pkg string }{
		{"mkfs.ext4", "formats sandbox drives", "e2fsprogs"},
		{"mkfs.xfs", "makes the drive pool (moat serve --drive-pool) for copy-free snapshots and forks", "xfsprogs"},
		{"unshare", "gives each sandbox's user namespace to its own uid (per-sandbox kernel limits)", "util-linux"},
		{"git", "repository layers (--repo)", "git"},
		{"debootstrap", "`moat template build debian`", "debootstrap"},
	} {
		p, err := exec.LookPath(t.name)
		out = append(out, Check{Name: t.name, OK: err == nil, Detail: t.why + map[bool]string{true: " (" + p + ")", false: ""}[err == nil],
			Fix: "apt-get install " + t.pkg})
	}
	return out
}

func levels(r Report) []Level {
	usable := map[string]bool{}
	for _, rt := range r.Runtimes {
		usable[rt.Name] = rt.Usable
	}
	micro := "needs KVM (/dev/kvm), absent here"
	if r.KVM != nil && r.KVM.Kind != KVMNone {
		micro = r.KVM.Detail + ": "
		if r.KVM.Standard() {
			micro += "microVMs could run, but moat has no microVM runtime yet"
		} else {
			micro += "stock microVM guests cannot run here (and moat has no microVM runtime yet)"
		}
	}
	return []Level{
		{Name: "container", Available: usable["runc"] || usable["crun"],
			Detail: "shared host kernel; own user namespace and uid range, seccomp allowlist, reduced capabilities, cgroup limits",
			Fix:    "apt-get install runc"},
		{Name: "gvisor", Available: usable["runsc"],
			Detail: "separate user-space kernel (gVisor): a kernel bug inside does not reach the host kernel directly",
			Fix:    "apt-get install runsc"},
		{Name: "microvm", Available: false,
			Detail: micro,
			Fix:    "bare metal or nested virtualization; not supported by moat yet"},
	}
}

// landlockABI asks the kernel for its Landlock ABI version.
func landlockABI() (int, error) {
	const createRulesetVersion = 1 << 0
	r, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, createRulesetVersion)
	if errno != 0 {
		return 0, errors.New(errno.Error())
	}
	return int(r), nil
}
