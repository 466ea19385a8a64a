package linux

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/testutil"
)

// TestCreateUserAndNetNS checks, for both owners, who owns the pinned user namespace (the
// kernel's own answer, NS_GET_OWNER_UID), that a process joining it sees the sandbox's map
// with setgroups allowed, and that the network namespace is another one than the host's.
func TestCreateUserAndNetNS(t *testing.T) {
	testutil.RequiresRoot(t)
	base := testutil.IDBase(t)
	for _, tc := range []struct {
		owner Owner
		want  uint32
	}{{OwnerRange, base}, {OwnerRoot, 0}} {
		t.Run(tc.owner.String(), func(t *testing.T) {
			dir := t.TempDir()
			files := NamespaceFiles{User: filepath.Join(dir, "userns"), Net: filepath.Join(dir, "netns")}
			if err := CreateUserAndNetNS(files, IDRange{Host: base, Size: 65536}, tc.owner); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = UnmountFile(files.Net); _ = UnmountFile(files.User) })
			got, err := UserNSOwner(files.User)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("the user namespace belongs to uid %d, want %d", got, tc.want)
			}
			// The network namespace belongs to the pinned user namespace (NS_GET_USERNS).
			netns, err := os.Open(files.Net)
			if err != nil {
				t.Fatal(err)
			}
			defer netns.Close()
			fd, err := unix.IoctlRetInt(int(netns.Fd()), 0xb701)
			if err != nil {
				t.Fatalf("NS_GET_USERNS: %v", err)
			}
			var owning, pinned unix.Stat_t
			err = unix.Fstat(fd, &owning)
			unix.Close(fd)
			if err != nil || unix.Stat(files.User, &pinned) != nil || owning.Ino != pinned.Ino {
				t.Errorf("the network namespace belongs to user namespace inode %d, want the pinned %d (%v)", owning.Ino, pinned.Ino, err)
			}
			out, err := exec.Command("nsenter", "--user="+files.User, "--net="+files.Net, "--",
				"sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups; readlink /proc/self/ns/net").CombinedOutput()
			if err != nil {
				t.Fatalf("nsenter: %v: %s", err, out)
			}
			lines := strings.Fields(string(out))
			want := []string{"0", fmt.Sprint(base), "65536", "0", fmt.Sprint(base), "65536", "allow"}
			if len(lines) != len(want)+1 || strings.Join(lines[:len(want)], " ") != strings.Join(want, " ") {
				t.Fatalf("inside: %q, want maps and setgroups %q", out, want)
			}
			host, _ := exec.Command("readlink", "/proc/self/ns/net").Output()
			if lines[len(want)] == strings.TrimSpace(string(host)) {
				t.Errorf("the pinned network namespace is the host's (%s)", host)
			}
		})
	}
}

// TestProbeOwnerRange: this host can give a user namespace to another uid.
func TestProbeOwnerRange(t *testing.T) {
	testutil.RequiresRoot(t)
	if err := ProbeOwnerRange(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCreateUserAndNetNS: one create and removal of a sandbox's pinned namespaces, per
// owner (the range's own uid runs unshare(1) as that uid; root clones directly).
func BenchmarkCreateUserAndNetNS(b *testing.B) {
	testutil.RequiresRoot(b)
	base := testutil.IDBase(b)
	for _, owner := range []Owner{OwnerRange, OwnerRoot} {
		b.Run(owner.String(), func(b *testing.B) {
			dir := b.TempDir()
			files := NamespaceFiles{User: filepath.Join(dir, "userns"), Net: filepath.Join(dir, "netns")}
			for b.Loop() {
				if err := CreateUserAndNetNS(files, IDRange{Host: base, Size: 65536}, owner); err != nil {
					b.Fatal(err)
				}
				_ = UnmountFile(files.Net)
				_ = UnmountFile(files.User)
			}
		})
	}
}
