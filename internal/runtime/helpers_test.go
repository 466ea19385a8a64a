package runtime

import (
	"os"
	"testing"
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs real OCI runtimes, namespaces and mounts")
	}
}
