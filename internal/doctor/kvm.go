package doctor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The kinds of KVM a host can have (KVM.Kind).
const (
	KVMNone    = "none"    // no /dev/kvm
	KVMVTx     = "vt-x"    // Intel VT-x (kvm_intel): runs unmodified guests
	KVMAMDV    = "amd-v"   // AMD-V (kvm_amd): runs unmodified guests
	KVMPVM     = "kvm-pvm" // paravirtual KVM (kvm_pvm): runs only guests built for PVM
	KVMUnknown = "unknown" // /dev/kvm without a module moat recognises
)

// KVMFacts are the files the KVM classification reads, as ReadKVMFacts found them under
// a root ("/" on a real host, a fixture tree in tests).
type KVMFacts struct {
	Device bool // /dev/kvm exists
	// Modules are the kvm* modules loaded or built in: the directories /sys/module/kvm*
	// (a built-in module has one too) and the kvm* names in /proc/modules.
	Modules []string
	// CPUFlags are the virtualization flags of the first processor in /proc/cpuinfo
	// among vmx, svm and hypervisor.
	CPUFlags []string
	// Hypervisor is /sys/hypervisor/type ("xen", …; "" absent).
	Hypervisor string
	// Nested is the nested parameter of kvm_intel or kvm_amd ("Y", "1", "N", "0"; ""
	// absent).
	Nested string
}

// KVM is what doctor says about the host's KVM.
type KVM struct {
	Kind string `json:"kind"`
	// Guest: this host is itself a virtual machine (the cpuinfo hypervisor flag).
	Guest bool `json:"guest"`
	// Nested is whether this KVM lets its guests use KVM in turn: "on", "off" or
	// "unknown" (no nested parameter: kvm_pvm has none).
	Nested string `json:"nested"`
	// Hardware: the CPU exposes VT-x or AMD-V to this kernel (vmx/svm in cpuinfo).
	Hardware bool `json:"hardware"`
	// Detail explains the kind in words, Allows what it permits and forbids.
	Detail   string   `json:"detail"`
	Allows   []string `json:"allows"`
	Evidence []string `json:"evidence"`
}

// Standard reports whether this KVM runs unmodified guests (what microVM runtimes such as
// Firecracker and Cloud Hypervisor, and runsc --platform=kvm, need).
func (k KVM) Standard() bool { return k.Kind == KVMVTx || k.Kind == KVMAMDV }

// ReadKVMFacts reads the KVM facts under root ("/" for this host).
func ReadKVMFacts(root string) KVMFacts {
	var f KVMFacts
	if _, err := os.Stat(filepath.Join(root, "dev/kvm")); err == nil {
		f.Device = true
	}
	if ents, err := os.ReadDir(filepath.Join(root, "sys/module")); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "kvm") && !slices.Contains(f.Modules, e.Name()) {
				f.Modules = append(f.Modules, e.Name())
			}
		}
	}
	if data, err := os.ReadFile(filepath.Join(root, "proc/modules")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			name, _, _ := strings.Cut(line, " ")
			if strings.HasPrefix(name, "kvm") && !slices.Contains(f.Modules, name) {
				f.Modules = append(f.Modules, name)
			}
		}
	}
	slices.Sort(f.Modules)
	if data, err := os.ReadFile(filepath.Join(root, "proc/cpuinfo")); err == nil {
		f.CPUFlags = cpuVirtFlags(string(data))
	}
	if data, err := os.ReadFile(filepath.Join(root, "sys/hypervisor/type")); err == nil {
		f.Hypervisor = strings.TrimSpace(string(data))
	}
	for _, m := range []string{"kvm_intel", "kvm_amd"} {
		if data, err := os.ReadFile(filepath.Join(root, "sys/module", m, "parameters/nested")); err == nil {
			f.Nested = strings.TrimSpace(string(data))
		}
	}
	return f
}

// cpuVirtFlags returns the virtualization flags (vmx, svm, hypervisor) of the first
// "flags" line of a /proc/cpuinfo.
func cpuVirtFlags(cpuinfo string) []string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(key) != "flags" {
			continue
		}
		var out []string
		for _, fl := range strings.Fields(val) {
			if fl == "vmx" || fl == "svm" || fl == "hypervisor" {
				out = append(out, fl)
			}
		}
		slices.Sort(out)
		return out
	}
	return nil
}

// ClassifyKVM says which KVM the facts describe and what it allows. Pure.
//
// kvm_pvm is checked first: a PVM host has no vmx/svm (it is a guest without hardware
// virtualization), and its /dev/kvm runs only guests whose kernel was built for PVM
// (CONFIG_KVM_PVM_GUEST) — not the stock guest kernels of Firecracker or Cloud
// Hypervisor, and not gVisor's KVM platform, which expects VT-x/AMD-V semantics (runsc
// --platform=kvm hangs on this kind of host).
func ClassifyKVM(f KVMFacts) KVM {
	has := func(flag string) bool { return slices.Contains(f.CPUFlags, flag) }
	mod := func(m string) bool { return slices.Contains(f.Modules, m) }
	k := KVM{Guest: has("hypervisor"), Hardware: has("vmx") || has("svm"), Nested: "unknown"}
	switch strings.ToUpper(f.Nested) {
	case "Y", "1":
		k.Nested = "on"
	case "N", "0":
		k.Nested = "off"
	}
	if f.Device {
		k.Evidence = append(k.Evidence, "/dev/kvm exists")
	} else {
		k.Evidence = append(k.Evidence, "no /dev/kvm")
	}
	for _, m := range f.Modules {
		k.Evidence = append(k.Evidence, "module "+m)
	}
	if len(f.CPUFlags) > 0 {
		k.Evidence = append(k.Evidence, "cpuinfo flags: "+strings.Join(f.CPUFlags, " "))
	} else {
		k.Evidence = append(k.Evidence, "cpuinfo flags: no vmx, svm or hypervisor")
	}
	if f.Hypervisor != "" {
		k.Evidence = append(k.Evidence, "/sys/hypervisor/type: "+f.Hypervisor)
	}
	if f.Nested != "" {
		k.Evidence = append(k.Evidence, "nested="+f.Nested)
	}
	microVM := "microVM runtimes (Firecracker, Cloud Hypervisor, QEMU microvm) with stock guest kernels"
	switch {
	case !f.Device:
		k.Kind = KVMNone
		k.Detail = "no /dev/kvm: no hardware virtualization for guests"
		if k.Guest && !k.Hardware {
			k.Detail += "; this host is a virtual machine whose hypervisor does not expose VT-x/AMD-V (nested virtualization off)"
		}
		k.Allows = []string{"no microVM isolation; runsc --platform=kvm unavailable (systrap and ptrace work)"}
	case mod("kvm_pvm"):
		k.Kind = KVMPVM
		k.Detail = "KVM-PVM: paravirtual KVM (kvm_pvm), not VT-x/AMD-V"
		if !k.Hardware {
			k.Detail += " — the CPU exposes no vmx/svm to this kernel"
		}
		if k.Guest {
			k.Detail += "; this host is itself a virtual machine"
		}
		k.Allows = []string{
			"runs only guests whose kernel is built for PVM (CONFIG_KVM_PVM_GUEST)",
			microVM + " do not run: they need VT-x/AMD-V, or a PVM-built guest kernel",
			"runsc --platform=kvm does not work (it hangs here); use systrap (moat's default) or ptrace",
			"nested virtualization: not offered (kvm_pvm has no nested parameter)",
		}
	case mod("kvm_intel") || mod("kvm_amd") || k.Hardware:
		k.Kind = KVMVTx
		name := "Intel VT-x (kvm_intel)"
		if mod("kvm_amd") || (!mod("kvm_intel") && has("svm")) {
			k.Kind, name = KVMAMDV, "AMD-V (kvm_amd)"
		}
		k.Detail = "hardware KVM: " + name
		if k.Guest {
			k.Detail += ", inside a virtual machine (nested virtualization from its host)"
		}
		k.Allows = []string{
			microVM + " can run (moat has no microVM runtime yet)",
			"runsc --platform=kvm can run",
		}
		switch k.Nested {
		case "on":
			k.Allows = append(k.Allows, "nested virtualization on: guests may use KVM in turn")
		case "off":
			k.Allows = append(k.Allows, "nested virtualization off: guests cannot use KVM (modprobe "+map[bool]string{true: "kvm_amd", false: "kvm_intel"}[k.Kind == KVMAMDV]+" nested=1 to allow it)")
		}
	default:
		k.Kind = KVMUnknown
		k.Detail = "/dev/kvm exists but no kvm_intel, kvm_amd or kvm_pvm module and no vmx/svm flag: unknown kind"
		k.Allows = []string{"unknown: check that a test guest boots before relying on it"}
	}
	return k
}

// kvmCheck is the doctor's KVM line: OK only for a KVM that runs unmodified guests.
func kvmCheck(k KVM) Check {
	c := Check{Name: "KVM", OK: k.Standard(), Detail: k.Detail}
	switch k.Kind {
	case KVMPVM:
		c.Fix = "microVM isolation needs VT-x/AMD-V (bare metal, or nested virtualization on the VM host) or a PVM-built guest kernel"
	case KVMNone, KVMUnknown:
		c.Fix = "enable virtualization (bare metal, or nested virtualization on the VM host) for microVM isolation"
	}
	return c
}
