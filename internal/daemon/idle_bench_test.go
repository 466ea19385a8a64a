package daemon_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/sdk"
)

// BenchmarkIdleResume measures, per runtime and in one daemon (256 MiB drives, so it does
// not depend on the free disk; a warm pool of 2 per runtime; idle sandboxes frozen 2 s,
// then stopped), the p50 time to an exec's first output: a create served by the warm pool
// (create → first output, 1 s between runs for the pool to refill, untimed), a sandbox
// frozen for idleness (thaw), and one stopped for idleness (start). It reports the medians
// and the ratios of both resumes to the warm create (target: ≤ 1.5). -benchtime 1x is
// enough: each iteration is the whole measurement (runs per figure: MOAT_BENCH_RUNS,
// default 15).
func BenchmarkIdleResume(b *testing.B) {
	c := benchDaemon(b, func(c *daemon.Config) {
		c.Warm = map[string]int{"runc": 2, "runsc": 2}
		c.IdleFreeze = 2 * time.Second
	})
	runs := benchRuns(15)
	ctx := context.Background()
	for b.Loop() {
		for _, rt := range []string{"runc", "runsc"} {
			var warm, thaw, start []time.Duration
			for range runs {
				time.Sleep(time.Second) // the pool refills
				d, err := firstOutput(ctx, c, "", v1.CreateSandboxRequest{Runtime: rt})
				if err != nil {
					b.Fatalf("%s warm create: %v", rt, err)
				}
				warm = append(warm, d)
			}
			one := int64(1)
			sb, err := c.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, IdleSeconds: &one})
			if err != nil {
				b.Fatal(err)
			}
			for _, st := range []string{"paused", "stopped"} {
				for range runs {
					waitState(b, c, sb.ID, st)
					d, err := firstOutput(ctx, c, sb.ID, v1.CreateSandboxRequest{})
					if err != nil {
						b.Fatalf("%s resume from %s: %v", rt, st, err)
					}
					if st == "paused" {
						thaw = append(thaw, d)
					} else {
						start = append(start, d)
					}
				}
			}
			_ = c.Delete(ctx, sb.ID)
			w, th, s := p50(warm), p50(thaw), p50(start)
			b.ReportMetric(w, rt+"-warm-create-p50-ms")
			b.ReportMetric(th, rt+"-resume-frozen-p50-ms")
			b.ReportMetric(s, rt+"-resume-stopped-p50-ms")
			b.ReportMetric(th/w, rt+"-frozen/warm")
			b.ReportMetric(s/w, rt+"-stopped/warm")
		}
	}
	b.ReportMetric(0, "ns/op")
}

// firstOutput times an exec's first stdout byte: in sandbox id, or (id "") in a sandbox
// created from req first (then deleted).
func firstOutput(ctx context.Context, c *sdk.Client, id string, req v1.CreateSandboxRequest) (time.Duration, error) {
	t0 := time.Now()
	if id == "" {
		sb, err := c.Create(ctx, req)
		if err != nil {
			return 0, err
		}
		id = sb.ID
		defer c.Delete(context.WithoutCancel(ctx), id)
	}
	fw := &firstByte{}
	code, err := c.Exec(ctx, id, sdk.ExecRequest{Cmd: "/bin/echo", Args: []string{"ready"}, Stdout: fw, User: "root"})
	if err != nil {
		return 0, err
	}
	if code != 0 || fw.at.IsZero() {
		return 0, fmt.Errorf("echo exited %d without output", code)
	}
	return fw.at.Sub(t0), nil
}

type firstByte struct{ at time.Time }

func (f *firstByte) Write(p []byte) (int, error) {
	if f.at.IsZero() && len(p) > 0 {
		f.at = time.Now()
	}
	return len(p), nil
}

func waitState(b *testing.B, c *sdk.Client, id, state string) {
	b.Helper()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		sb, err := c.Get(context.Background(), id)
		if err != nil {
			b.Fatal(err)
		}
		if sb.State == state && sb.StopReason == "idle" {
			return
		}
		if time.Now().After(end) {
			b.Fatalf("sandbox %s not %s for idleness within 30 s (%s)", id, state, sb.State)
		}
	}
}

func p50(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}
