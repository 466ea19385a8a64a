package doctor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTree writes files (path → content; content "" for a directory) under a new root.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	cpuPVM   = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu vme de pse sse2 hypervisor lahf_lm\n\nprocessor\t: 1\nflags\t\t: fpu hypervisor\n"
	cpuIntel = "processor\t: 0\nflags\t\t: fpu vme vmx ept sse2\n"
	cpuAMDVM = "processor\t: 0\nflags\t\t: fpu svm hypervisor npt\n"
	cpuPlain = "processor\t: 0\nflags\t\t: fpu hypervisor sse2\n"
)

// TestClassifyKVMFixtures reads fixture trees of the files (this host's layout among
// them: kvm_pvm built in, so a /sys/module directory and no /proc/modules) and checks the
// kind, nesting and what each allows.
func TestClassifyKVMFixtures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    map[string]string
		kind     string
		nested   string
		guest    bool
		standard bool
		mention  string // in Detail or Allows
	}{
		{name: "this host: kvm-pvm built in", files: map[string]string{
			"dev/kvm": "", "sys/module/kvm/": "", "sys/module/kvm_pvm/parameters/": "", "proc/cpuinfo": cpuPVM,
		}, kind: KVMPVM, nested: "unknown", guest: true, mention: "runsc --platform=kvm"},
		{name: "kvm-pvm as a loadable module", files: map[string]string{
			"dev/kvm": "", "proc/modules": "kvm_pvm 12345 0 - Live 0x0\nkvm 1000 1 kvm_pvm, Live 0x0\n", "proc/cpuinfo": cpuPVM,
		}, kind: KVMPVM, nested: "unknown", guest: true, mention: "built for PVM"},
		{name: "bare-metal intel, nested on", files: map[string]string{
			"dev/kvm": "", "sys/module/kvm/": "", "sys/module/kvm_intel/parameters/nested": "Y\n", "proc/cpuinfo": cpuIntel,
		}, kind: KVMVTx, nested: "on", standard: true, mention: "nested virtualization on"},
		{name: "amd guest with nested kvm, nested off", files: map[string]string{
			"dev/kvm": "", "sys/module/kvm_amd/parameters/nested": "0\n", "proc/cpuinfo": cpuAMDVM,
		}, kind: KVMAMDV, nested: "off", guest: true, standard: true, mention: "nested=1"},
		{name: "vm without kvm", files: map[string]string{
			"proc/cpuinfo": cpuPlain, "sys/hypervisor/type": "xen\n",
		}, kind: KVMNone, nested: "unknown", guest: true, mention: "does not expose VT-x/AMD-V"},
		{name: "device, no module, no flag", files: map[string]string{
			"dev/kvm": "", "proc/cpuinfo": cpuPlain,
		}, kind: KVMUnknown, nested: "unknown", guest: true, mention: "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := ClassifyKVM(ReadKVMFacts(writeTree(t, tc.files)))
			if k.Kind != tc.kind || k.Nested != tc.nested || k.Guest != tc.guest || k.Standard() != tc.standard {
				t.Fatalf("got kind %s nested %s guest %v standard %v, want %s %s %v %v (%+v)", k.Kind, k.Nested, k.Guest, k.Standard(), tc.kind, tc.nested, tc.guest, tc.standard, k)
			}
			text := k.Detail + "\n" + strings.Join(k.Allows, "\n")
			if !strings.Contains(text, tc.mention) {
				t.Errorf("detail/allows %q lack %q", text, tc.mention)
			}
			c := kvmCheck(k)
			if c.OK != tc.standard || (!c.OK && c.Fix == "") {
				t.Errorf("check %+v: want OK %v and a fix when not", c, tc.standard)
			}
		})
	}
}

func TestCPUVirtFlags(t *testing.T) {
	for in, want := range map[string][]string{
		cpuPVM: {"hypervisor"}, cpuIntel: {"vmx"}, cpuAMDVM: {"hypervisor", "svm"}, "": nil,
		"flags: vmxx svm-like": nil,
	} {
		if got := cpuVirtFlags(in); !slices.Equal(got, want) {
			t.Errorf("cpuVirtFlags(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestThisHostKVM: on a host whose kernel has kvm_pvm, doctor names KVM-PVM and does not
// call it a usable KVM.
func TestThisHostKVM(t *testing.T) {
	if _, err := os.Stat("/sys/module/kvm_pvm"); err != nil {
		t.Skip("not a KVM-PVM host")
	}
	k := ClassifyKVM(ReadKVMFacts("/"))
	if k.Kind != KVMPVM || k.Standard() || !strings.Contains(k.Detail, "KVM-PVM") {
		t.Fatalf("this host: %+v", k)
	}
}
