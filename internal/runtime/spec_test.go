package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

func testContainerSpec(runtimeName string) sandbox.ContainerSpec {
	cs := sandbox.ContainerSpec{
		ID:        "sb-0123456789ab",
		BundleDir: "/run/moat/sandboxes/sb-0123456789ab/bundle",
		Rootfs:    "/run/moat/sandboxes/sb-0123456789ab/rootfs",
		InitPath:  "/usr/lib/moat/moat-init",
		InitEnv:   []string{"MOAT_DEFAULT_USER=user", "MOAT_ENV={}"},
		InitInput: []byte("init-input-never-in-the-spec"),
		Hostname:  "sb-0123456789ab",
		UserNS:    "/run/moat/sandboxes/sb-0123456789ab/userns",
		IDs:       sandbox.IDRange{Host: 0x40010000, Size: 65536},
		NetNS:     "/run/moat/sandboxes/sb-0123456789ab/netns",
	}
	if runtimeName == "runsc" {
		cs.UserNS = ""
	}
	return cs
}

var v1Host = hostFeatures{cgroupNS: true, memsw: true, swappiness: true}

func nsByType(s *specs.Spec, typ specs.LinuxNamespaceType) (specs.LinuxNamespace, bool) {
	for _, n := range s.Linux.Namespaces {
		if n.Type == typ {
			return n, true
		}
	}
	return specs.LinuxNamespace{}, false
}

func TestBuildSpecRuntimes(t *testing.T) {
	for _, tc := range []struct {
		runtime  string
		byPath   bool // the runtime reads a joined user namespace's mappings itself
		userNS   bool // joins U by path
		mappings bool // with U's mappings
		netNS    bool // joins S by path
		netnsAnn bool // records S in an annotation
	}{
		{runtime: "runc", userNS: true, mappings: true, netNS: true},
		{runtime: "runc", byPath: true, userNS: true, netNS: true},
		{runtime: "crun", userNS: true, mappings: true, netNS: true},
		{runtime: "runsc", netnsAnn: true},
	} {
		t.Run(fmt.Sprintf("%s/bypath=%v", tc.runtime, tc.byPath), func(t *testing.T) {
			cs := testContainerSpec(tc.runtime)
			host := v1Host
			host.joinUserNSByPath = tc.byPath
			s, err := buildSpec(cs, tc.runtime, host)
			if err != nil {
				t.Fatal(err)
			}
			if s.Version != "1.0.2" {
				t.Errorf("ociVersion %q", s.Version)
			}
			// Process.
			p := s.Process
			if !slices.Equal(p.Args, []string{"/.moat/moat-init"}) || p.Cwd != "/" || p.User.UID != 0 || p.User.GID != 0 {
				t.Errorf("process %+v", p)
			}
			if p.NoNewPrivileges {
				t.Error("noNewPrivileges set: sudo inside would break")
			}
			if p.Terminal {
				t.Error("terminal set")
			}
			wantEnv := append(slices.Clone(cs.InitEnv), defaultPath)
			if !slices.Equal(p.Env, wantEnv) {
				t.Errorf("env %v, want %v", p.Env, wantEnv)
			}
			if p.OOMScoreAdj == nil || *p.OOMScoreAdj != 500 {
				t.Errorf("oomScoreAdj %v", p.OOMScoreAdj)
			}
			if !slices.Equal(p.Rlimits, []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 65536, Soft: 65536}}) {
				t.Errorf("rlimits %v", p.Rlimits)
			}
			if s.Root.Path != cs.Rootfs || s.Root.Readonly || s.Hostname != cs.Hostname {
				t.Errorf("root %+v hostname %q", s.Root, s.Hostname)
			}
			// Namespaces.
			for _, typ := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace,
				specs.UTSNamespace, specs.MountNamespace, specs.CgroupNamespace} {
				if n, ok := nsByType(s, typ); !ok || n.Path != "" {
					t.Errorf("namespace %s: %+v %v", typ, n, ok)
				}
			}
			u, hasU := nsByType(s, specs.UserNamespace)
			n, hasN := nsByType(s, specs.NetworkNamespace)
			if hasU != tc.userNS || (hasU && u.Path != cs.UserNS) {
				t.Errorf("user namespace %+v (present %v)", u, hasU)
			}
			if hasN != tc.netNS || (hasN && n.Path != cs.NetNS) {
				t.Errorf("network namespace %+v (present %v)", n, hasN)
			}
			wantMap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: cs.IDs.Host, Size: cs.IDs.Size}}
			if tc.mappings {
				if !slices.Equal(s.Linux.UIDMappings, wantMap) || !slices.Equal(s.Linux.GIDMappings, wantMap) {
					t.Errorf("mappings %v %v", s.Linux.UIDMappings, s.Linux.GIDMappings)
				}
			} else if len(s.Linux.UIDMappings)+len(s.Linux.GIDMappings) != 0 {
				t.Errorf("%s got id mappings %v %v", tc.runtime, s.Linux.UIDMappings, s.Linux.GIDMappings)
			}
			if got := s.Annotations[netnsAnnotation]; (got != "") != tc.netnsAnn || (tc.netnsAnn && got != cs.NetNS) {
				t.Errorf("netns annotation %q", got)
			}
			if s.Linux.CgroupsPath != "/moat/"+cs.ID {
				t.Errorf("cgroupsPath %q", s.Linux.CgroupsPath)
			}
			if !slices.Equal(s.Linux.MaskedPaths, maskedPaths()) || !slices.Equal(s.Linux.ReadonlyPaths, readonlyPaths()) {
				t.Error("masked/readonly paths differ")
			}
			for _, m := range []string{"/proc/kcore", "/proc/keys", "/sys/firmware", "/proc/sched_debug"} {
				if !slices.Contains(s.Linux.MaskedPaths, m) {
					t.Errorf("%s not masked", m)
				}
			}
			if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") || !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sysrq-trigger") {
				t.Error("/proc/sys or sysrq-trigger not read-only")
			}
			if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActErrno {
				t.Error("no seccomp profile")
			}
		})
	}
}

func TestBuildSpecCapabilities(t *testing.T) {
	s, err := buildSpec(testContainerSpec("runc"), "runc", v1Host)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Process.Capabilities
	want := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_SETGID",
		"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
		"CAP_KILL", "CAP_AUDIT_WRITE"}
	for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted} {
		if !slices.Equal(slices.Sorted(slices.Values(set)), slices.Sorted(slices.Values(want))) {
			t.Errorf("%s = %v", name, set)
		}
	}
	if len(c.Inheritable) != 0 || len(c.Ambient) != 0 {
		t.Errorf("inheritable %v ambient %v", c.Inheritable, c.Ambient)
	}
	for _, bad := range []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_PTRACE",
		"CAP_MKNOD", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_DAC_READ_SEARCH", "CAP_SYS_TIME", "CAP_BPF"} {
		if slices.Contains(c.Bounding, bad) {
			t.Errorf("%s granted", bad)
		}
	}
	// The exported slice is not shared with the spec.
	c.Bounding[0] = "CAP_SYS_ADMIN"
	if Capabilities()[0] == "CAP_SYS_ADMIN" {
		t.Fatal("BuildSpec aliases Capabilities")
	}
}

// TestBuildSpecMounts: moat-init is the only host path in the sandbox.
func TestBuildSpecMounts(t *testing.T) {
	for _, rt := range Names() {
		cs := testContainerSpec(rt)
		s, err := buildSpec(cs, rt, v1Host)
		if err != nil {
			t.Fatal(err)
		}
		byDest := map[string]specs.Mount{}
		var binds []specs.Mount
		for _, m := range s.Mounts {
			byDest[m.Destination] = m
			if m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") ||
				filepath.IsAbs(m.Source) {
				binds = append(binds, m)
			}
		}
		if len(binds) != 1 {
			t.Fatalf("%s: host mounts %v, want only moat-init", rt, binds)
		}
		b := binds[0]
		if b.Source != cs.InitPath || b.Destination != "/.moat/moat-init" {
			t.Errorf("%s: init mount %+v", rt, b)
		}
		for _, o := range []string{"ro", "nosuid", "nodev"} {
			if !slices.Contains(b.Options, o) {
				t.Errorf("%s: init mount lacks %s: %v", rt, o, b.Options)
			}
		}
		for dest, typ := range map[string]string{"/proc": "proc", "/dev": "tmpfs", "/dev/pts": "devpts",
			"/dev/shm": "tmpfs", "/dev/mqueue": "mqueue", "/sys": "sysfs", "/sys/fs/cgroup": "cgroup"} {
			if byDest[dest].Type != typ {
				t.Errorf("%s: %s is %q, want %s", rt, dest, byDest[dest].Type, typ)
			}
		}
		if _, ok := byDest["/tmp"]; ok {
			t.Errorf("%s: /tmp is a mount (must stay on the drive)", rt)
		}
		for _, dest := range []string{"/sys", "/sys/fs/cgroup"} {
			if !slices.Contains(byDest[dest].Options, "ro") {
				t.Errorf("%s: %s not read-only", rt, dest)
			}
		}
		if !slices.Contains(byDest["/dev/shm"].Options, "noexec") || !slices.Contains(byDest["/dev/shm"].Options, "size=64m") {
			t.Errorf("%s: /dev/shm options %v", rt, byDest["/dev/shm"].Options)
		}
		if !slices.Contains(byDest["/dev/pts"].Options, "newinstance") || !slices.Contains(byDest["/dev/pts"].Options, "gid=5") {
			t.Errorf("%s: /dev/pts options %v", rt, byDest["/dev/pts"].Options)
		}
	}
	// gid 5 must be mapped for runc to mount devpts with it.
	cs := testContainerSpec("runc")
	cs.IDs.Size = 1
	s, err := buildSpec(cs, "runc", v1Host)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Mounts {
		if m.Destination == "/dev/pts" && slices.Contains(m.Options, "gid=5") {
			t.Error("gid=5 with a 1-id mapping")
		}
	}
}

func TestBuildSpecResources(t *testing.T) {
	for _, tc := range []struct {
		name       string
		host       hostFeatures
		limits     sandbox.Limits
		mem        int64
		swap       *int64
		swappiness *uint64
		quota      int64
		pids       int64
		cgroupNS   bool
	}{
		{name: "v1 defaults", host: v1Host, mem: 2 << 30, swap: ptr(int64(2 << 30)), swappiness: ptr(uint64(0)),
			quota: 200000, pids: 1024, cgroupNS: true},
		{name: "v1 explicit", host: v1Host, limits: sandbox.Limits{MemoryBytes: 512 << 20, CPUs: 0.5, Pids: 64},
			mem: 512 << 20, swap: ptr(int64(512 << 20)), swappiness: ptr(uint64(0)), quota: 50000, pids: 64, cgroupNS: true},
		{name: "v1 without swap accounting", host: hostFeatures{cgroupNS: true, swappiness: true},
			mem: 2 << 30, swappiness: ptr(uint64(0)), quota: 200000, pids: 1024, cgroupNS: true},
		{name: "v2", host: hostFeatures{cgroupNS: true, cgroupV2: true}, limits: sandbox.Limits{CPUs: 4},
			mem: 2 << 30, swap: ptr(int64(2 << 30)), quota: 400000, pids: 1024, cgroupNS: true},
		{name: "no cgroup namespace", host: hostFeatures{memsw: true}, mem: 2 << 30, swap: ptr(int64(2 << 30)),
			quota: 200000, pids: 1024},
		{name: "tiny cpu", host: v1Host, limits: sandbox.Limits{CPUs: 0.001}, mem: 2 << 30,
			swap: ptr(int64(2 << 30)), swappiness: ptr(uint64(0)), quota: 1000, pids: 1024, cgroupNS: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := testContainerSpec("runc")
			cs.Limits = tc.limits
			s, err := buildSpec(cs, "runc", tc.host)
			if err != nil {
				t.Fatal(err)
			}
			r := s.Linux.Resources
			if *r.Memory.Limit != tc.mem {
				t.Errorf("memory %d, want %d", *r.Memory.Limit, tc.mem)
			}
			if !reflect.DeepEqual(r.Memory.Swap, tc.swap) {
				t.Errorf("swap %v, want %v", deref(r.Memory.Swap), deref(tc.swap))
			}
			if !reflect.DeepEqual(r.Memory.Swappiness, tc.swappiness) {
				t.Errorf("swappiness %v, want %v", deref(r.Memory.Swappiness), deref(tc.swappiness))
			}
			if *r.CPU.Quota != tc.quota || *r.CPU.Period != 100000 {
				t.Errorf("cpu quota %d period %d", *r.CPU.Quota, *r.CPU.Period)
			}
			if r.Pids.Limit == nil || *r.Pids.Limit != tc.pids {
				t.Errorf("pids %v, want %d", deref(r.Pids.Limit), tc.pids)
			}
			if _, ok := nsByType(s, specs.CgroupNamespace); ok != tc.cgroupNS {
				t.Errorf("cgroup namespace present = %v", ok)
			}
			// Devices: deny everything first, then only character devices.
			d := r.Devices
			if len(d) < 2 || d[0].Allow || d[0].Type != "" || d[0].Access != "rwm" {
				t.Fatalf("devices %+v", d)
			}
			for _, dev := range d[1:] {
				if !dev.Allow || dev.Type != "c" || dev.Major == nil {
					t.Errorf("device rule %+v", dev)
				}
			}
		})
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestBuildSpecRejects(t *testing.T) {
	for name, mutate := range map[string]func(*sandbox.ContainerSpec, *string){
		"unknown runtime":  func(_ *sandbox.ContainerSpec, rt *string) { *rt = "docker" },
		"empty id":         func(cs *sandbox.ContainerSpec, _ *string) { cs.ID = "" },
		"id with slash":    func(cs *sandbox.ContainerSpec, _ *string) { cs.ID = "../x" },
		"relative rootfs":  func(cs *sandbox.ContainerSpec, _ *string) { cs.Rootfs = "rootfs" },
		"no init":          func(cs *sandbox.ContainerSpec, _ *string) { cs.InitPath = "" },
		"no netns":         func(cs *sandbox.ContainerSpec, _ *string) { cs.NetNS = "" },
		"runc without U":   func(cs *sandbox.ContainerSpec, _ *string) { cs.UserNS = "" },
		"empty id range":   func(cs *sandbox.ContainerSpec, _ *string) { cs.IDs = sandbox.IDRange{} },
		"host root mapped": func(cs *sandbox.ContainerSpec, _ *string) { cs.IDs.Host = 0 },
		"range overflow":   func(cs *sandbox.ContainerSpec, _ *string) { cs.IDs.Host = 0xffffff00 },
		"negative memory":  func(cs *sandbox.ContainerSpec, _ *string) { cs.Limits.MemoryBytes = -1 },
		"negative cpus":    func(cs *sandbox.ContainerSpec, _ *string) { cs.Limits.CPUs = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			rt := "runc"
			cs := testContainerSpec(rt)
			mutate(&cs, &rt)
			_, err := buildSpec(cs, rt, v1Host)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("err = %v, want ErrInvalidArgument", err)
			}
		})
	}
	// runsc needs no user namespace.
	if _, err := buildSpec(testContainerSpec("runsc"), "runsc", v1Host); err != nil {
		t.Fatal(err)
	}
}

// TestBuildSpecJSON: the spec is valid JSON of the runtime-spec types and survives a round
// trip unchanged; InitInput (the access token) is nowhere in it.
func TestBuildSpecJSON(t *testing.T) {
	for _, rt := range Names() {
		s, err := buildSpec(testContainerSpec(rt), rt, v1Host)
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back specs.Spec
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&back); err != nil {
			t.Fatalf("%s: %v", rt, err)
		}
		if !reflect.DeepEqual(*s, back) {
			t.Errorf("%s: spec changed in a JSON round trip", rt)
		}
		if strings.Contains(string(data), "init-input-never-in-the-spec") {
			t.Errorf("%s: the init input is in the spec", rt)
		}
		if !strings.Contains(string(data), `"defaultErrnoRet":1`) {
			t.Errorf("%s: seccomp defaultErrnoRet missing", rt)
		}
	}
}

func TestInitEnvKeepsPath(t *testing.T) {
	env := initEnv([]string{"A=1", "PATH=/custom"})
	if !slices.Equal(env, []string{"A=1", "PATH=/custom"}) {
		t.Errorf("env %v", env)
	}
}

// TestSpecNofileAndBlockIO: the sandbox's nofile is every process' RLIMIT_NOFILE (soft =
// hard), and io_bps/io_iops throttle reads and writes on the drive's device only when both
// a throttle and the device are known.
func TestSpecNofileAndBlockIO(t *testing.T) {
	drive := &device{7, 12}
	for _, tc := range []struct {
		name   string
		limits sandbox.Limits
		drive  *device
		nofile uint64
		blkio  *specs.LinuxBlockIO
	}{
		{name: "defaults", nofile: 65536},
		{name: "nofile", limits: sandbox.Limits{Nofile: 602}, nofile: 602},
		{name: "throttle without a device", limits: sandbox.Limits{IOBps: 1 << 20}, nofile: 65536},
		{name: "device without a throttle", drive: drive, nofile: 65536},
		{name: "bps and iops", limits: sandbox.Limits{IOBps: 16 << 20, IOIops: 400}, drive: drive, nofile: 65536,
			blkio: &specs.LinuxBlockIO{
				ThrottleReadBpsDevice:   []specs.LinuxThrottleDevice{throttle(7, 12, 16<<20)},
				ThrottleWriteBpsDevice:  []specs.LinuxThrottleDevice{throttle(7, 12, 16<<20)},
				ThrottleReadIOPSDevice:  []specs.LinuxThrottleDevice{throttle(7, 12, 400)},
				ThrottleWriteIOPSDevice: []specs.LinuxThrottleDevice{throttle(7, 12, 400)},
			}},
		{name: "iops only", limits: sandbox.Limits{IOIops: 100}, drive: drive, nofile: 65536,
			blkio: &specs.LinuxBlockIO{
				ThrottleReadIOPSDevice:  []specs.LinuxThrottleDevice{throttle(7, 12, 100)},
				ThrottleWriteIOPSDevice: []specs.LinuxThrottleDevice{throttle(7, 12, 100)},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, rt := range []string{"runc", "runsc"} {
				cs := testContainerSpec(rt)
				cs.Limits = tc.limits
				s, err := buildSpec(cs, rt, hostFeatures{cgroupNS: true, memsw: true, drive: tc.drive})
				if err != nil {
					t.Fatal(err)
				}
				if want := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: tc.nofile, Soft: tc.nofile}}; !reflect.DeepEqual(s.Process.Rlimits, want) {
					t.Errorf("%s: rlimits %+v, want %+v", rt, s.Process.Rlimits, want)
				}
				if !reflect.DeepEqual(s.Linux.Resources.BlockIO, tc.blkio) {
					t.Errorf("%s: blockIO %+v, want %+v", rt, s.Linux.Resources.BlockIO, tc.blkio)
				}
			}
		})
	}
}

func throttle(major, minor int64, rate uint64) specs.LinuxThrottleDevice {
	d := specs.LinuxThrottleDevice{Rate: rate}
	d.Major, d.Minor = major, minor
	return d
}

// TestBuildSpecRunscUserNS: a runsc container given the sandbox's user namespace (a current
// gVisor, OCI.MapsUsers) gets a new user namespace with the sandbox's range — not the
// pinned one by path, which runsc cannot join — and the same mappings as runc; without
// one (runsc 2022-12) it gets neither.
func TestBuildSpecRunscUserNS(t *testing.T) {
	cs := testContainerSpec("runc") // with UserNS and IDs
	s, err := buildSpec(cs, "runsc", v1Host)
	if err != nil {
		t.Fatal(err)
	}
	u, ok := nsByType(s, specs.UserNamespace)
	if !ok || u.Path != "" {
		t.Errorf("user namespace %+v (present %v), want a new one", u, ok)
	}
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: cs.IDs.Host, Size: cs.IDs.Size}}
	if !slices.Equal(s.Linux.UIDMappings, want) || !slices.Equal(s.Linux.GIDMappings, want) {
		t.Errorf("mappings %v %v, want %v", s.Linux.UIDMappings, s.Linux.GIDMappings, want)
	}
	if _, ok := nsByType(s, specs.NetworkNamespace); ok {
		t.Error("network namespace in the spec: the driver adds it for gVisor's own stack (withOwnNetstack)")
	}
	cs.IDs = sandbox.IDRange{}
	if _, err := buildSpec(cs, "runsc", v1Host); err == nil {
		t.Error("a runsc spec with a user namespace and no id range was accepted")
	}
	s, err = buildSpec(testContainerSpec("runsc"), "runsc", v1Host)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := nsByType(s, specs.UserNamespace); ok || len(s.Linux.UIDMappings) != 0 {
		t.Errorf("runsc without UserNS: user namespace or mappings %v", s.Linux.UIDMappings)
	}
}

// TestUserNSByPathOnly: only runc from 1.2 on gets the user namespace's path without its
// mappings; runc 1.1 (Debian 12's 1.1.5 fails without them), crun, and an unknown version
// keep them.
func TestUserNSByPathOnly(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      bool
	}{
		{"runc", "runc version 1.5.3", true},
		{"runc", "runc version 1.2.0-rc.1", true},
		{"runc", "runc version 2.0.0", true},
		{"runc", "runc version 1.1.15", false},
		{"runc", "runc version 1.1.5+ds1", false},
		{"crun", "crun version 1.8.1", false},
		{"runsc", "runsc version v0.0.0-20260905035102-160fafc42237", false},
	} {
		v, err := ParseVersion(tc.name, []byte(tc.out))
		if err != nil {
			t.Fatal(err)
		}
		if got := userNSByPathOnly(tc.name, v); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.out, got, tc.want)
		}
	}
	if userNSByPathOnly("runc", Version{Runtime: "runc"}) {
		t.Error("an unknown runc version drops the mappings")
	}
}
