package daemon_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// BenchmarkMetricsScrape measures GET /metrics over the unix socket (target ≤ 50 ms with
// 100 sandboxes). 100 running sandboxes are too heavy for this 2-core host, so the daemon
// runs 3 real runc sandboxes (execs, egress and DNS so every family has series) and the
// store holds 100 more sandbox records (stopped, runc and runsc), which is what the
// scrape reads: the sandboxes gauge is one grouped query over the records. It reports the
// median scrape with the 3 real sandboxes only (the baseline, same run) and with the 100
// records added, and their ratio. -benchtime 1x: each iteration is MOAT_BENCH_RUNS
// scrapes (default 200) per figure.
func BenchmarkMetricsScrape(b *testing.B) {
	testutil.RequiresRoot(b)
	runDir := "/run/moat-bench-" + shortID()
	cfg := daemon.Config{
		DataDir: b.TempDir(), RunDir: runDir, Socket: filepath.Join(runDir, "moat.sock"),
		InitPath: filepath.Join(testutil.Binaries(b), "moat-init"), IDBase: testutil.IDBase(b),
		Log:           slog.New(slog.DiscardHandler),
		DefaultLimits: sandbox.Limits{DiskBytes: 256 << 20, MemoryBytes: 512 << 20},
	}
	d, stop, err := daemon.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	c := sdk.NewUnix(cfg.Socket)
	var fake []string
	b.Cleanup(func() {
		ctx := context.Background()
		for _, id := range fake {
			_ = d.Store.Delete(ctx, id)
		}
		list, _ := c.List(ctx)
		for _, sb := range list {
			_ = c.Delete(ctx, sb.ID)
		}
		stop()
		os.RemoveAll(runDir)
	})
	ctx := context.Background()
	for range 3 {
		sb, err := c.Create(ctx, v1.CreateSandboxRequest{Runtime: "runc",
			Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"example.test"}}}}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", "getent hosts example.test denied.test; timeout 2 bash -c 'exec 3<>/dev/tcp/192.0.2.7/80'; true"}}); err != nil {
			b.Fatal(err)
		}
	}
	s := unixScraper(cfg.Socket)
	runs := benchRuns(200)
	measure := func() time.Duration {
		ds := make([]time.Duration, runs)
		for i := range ds {
			start := time.Now()
			resp, err := s.client.Get(s.url)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("scrape: %d", resp.StatusCode)
			}
			ds[i] = time.Since(start)
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	for b.Loop() {
		base := measure()
		for i := range 100 {
			rt := []string{"runc", "runsc"}[i%2]
			rec := &sandbox.Sandbox{ID: fmt.Sprintf("sb-bench%06d", i), State: sandbox.StateStopped, Runtime: rt,
				CreatedAt: time.Now(), UpdatedAt: time.Now()}
			if err := d.Store.Insert(ctx, rec); err != nil {
				b.Fatal(err)
			}
			fake = append(fake, rec.ID)
		}
		fams, _ := s.families(b)
		if n, _ := sample(fams, "moat_sandboxes", map[string]string{"state": "stopped"}); n != 100 {
			b.Fatalf("the scrape counts %v stopped sandboxes, want the 100 records", n)
		}
		with := measure()
		b.ReportMetric(float64(base.Microseconds())/1000, "scrape-3-sandboxes-ms")
		b.ReportMetric(float64(with.Microseconds())/1000, "scrape-103-sandboxes-ms")
		b.ReportMetric(float64(with)/float64(base), "ratio")
		for _, id := range fake {
			_ = d.Store.Delete(ctx, id)
		}
		fake = nil
	}
	b.StopTimer()
}
