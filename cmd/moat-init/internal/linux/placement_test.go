package linux

import "testing"

// Lines as runc (ext4 bind) and gVisor (9p) show moat-init's mount.
const (
	runcMount  = "102 84 254:0 /tmp/x/moat-init /.moat/moat-init ro,nosuid,nodev,relatime - ext4 /dev/vda rw,discard\n"
	runscMount = "14 8 0:13 / /.moat/moat-init ro  - 9p none ro,trans:fd,rfdno=4,wfdno=4,aname=/\n"
	rootMount  = "84 60 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
)

func TestMountedReadOnly(t *testing.T) {
	for name, tc := range map[string]struct {
		info, path string
		want       bool
	}{
		"runc":                      {rootMount + runcMount, "/.moat/moat-init", true},
		"runsc":                     {rootMount + runscMount, "/.moat/moat-init", true},
		"not a mount point":         {rootMount, "/.moat/moat-init", false},
		"read-write bind":           {"5 1 8:1 /x /.moat/moat-init rw,nosuid - ext4 /dev/sda ro\n", "/.moat/moat-init", false},
		"ro only in super options":  {"5 1 8:1 /x /.moat/moat-init rw - ext4 /dev/sda ro\n", "/.moat/moat-init", false},
		"topmost mount counts (rw)": {runcMount + "7 1 8:1 /y /.moat/moat-init rw - ext4 /dev/sda rw\n", "/.moat/moat-init", false},
		"topmost mount counts (ro)": {"7 1 8:1 /y /.moat/moat-init rw - ext4 /dev/sda rw\n" + runcMount, "/.moat/moat-init", true},
		"another path":              {runcMount, "/.moat/moat-init2", false},
		"a prefix of the path":      {"5 1 8:1 / /.moat ro - ext4 /dev/sda ro\n", "/.moat/moat-init", false},
		"escaped space":             {"5 1 8:1 / /a\\040b ro - ext4 /dev/sda ro\n", "/a b", true},
		"short line":                {"5 1 8:1 / /.moat/moat-init\n", "/.moat/moat-init", false},
		"empty":                     {"", "/.moat/moat-init", false},
	} {
		if got := MountedReadOnly([]byte(tc.info), tc.path); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func FuzzMountedReadOnly(f *testing.F) {
	f.Add([]byte(rootMount+runcMount), "/.moat/moat-init")
	f.Add([]byte(runscMount), "/.moat/moat-init")
	f.Add([]byte("5 1 8:1 / /a\\040b\\1 ro - ext4 /dev/sda ro\n"), "/a b\\1")
	f.Fuzz(func(t *testing.T, info []byte, path string) {
		got := MountedReadOnly(info, path)
		// Read-only only if some line names the path with "ro" among its options.
		if got && !containsRO(info) {
			t.Fatalf("read-only without any ro option in %q", info)
		}
		_ = unescapeMountPath(path)
	})
}

func containsRO(b []byte) bool {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == 'r' && b[i+1] == 'o' {
			return true
		}
	}
	return false
}
