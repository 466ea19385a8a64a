package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// benchRuns is the number of runs per figure of a daemon benchmark: MOAT_BENCH_RUNS, or def.
func benchRuns(def int) int {
	runs := def
	if n, err := fmt.Sscan(os.Getenv("MOAT_BENCH_RUNS"), &runs); n != 1 || err != nil {
		return def
	}
	return runs
}

// benchDaemon starts a daemon of its own for a benchmark (256 MiB drives, so that it does
// not depend on the free disk; quiet log), configured further by mod, and returns its
// client. At the end every sandbox is deleted and the daemon stopped.
func benchDaemon(b *testing.B, mod func(*daemon.Config)) *sdk.Client {
	testutil.RequiresRoot(b)
	runDir := "/run/moat-bench-" + shortID()
	cfg := daemon.Config{
		DataDir: b.TempDir(), RunDir: runDir, Socket: filepath.Join(runDir, "moat.sock"),
		InitPath: filepath.Join(testutil.Binaries(b), "moat-init"), IDBase: testutil.IDBase(b),
		Log:           slog.New(slog.DiscardHandler),
		DefaultLimits: sandbox.Limits{DiskBytes: 256 << 20, MemoryBytes: 512 << 20},
	}
	if mod != nil {
		mod(&cfg)
	}
	_, stop, err := daemon.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	c := sdk.NewUnix(cfg.Socket)
	b.Cleanup(func() {
		list, _ := c.List(context.Background())
		for _, sb := range list {
			_ = c.Delete(context.Background(), sb.ID)
		}
		stop()
		os.RemoveAll(runDir)
	})
	return c
}
