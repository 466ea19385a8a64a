package daemon_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// BenchmarkExecArgv measures, per runtime in one daemon, the median time of one exec of
// `true a b` started the way `moat exec ID -- prog arg…` did before (bash -l -c 'true a
// b') and the way it does now with several arguments (the program directly, no shell). It
// reports both medians and the saving. -benchtime 1x is enough: each iteration is the
// whole measurement (runs per figure: MOAT_BENCH_RUNS, default 31).
func BenchmarkExecArgv(b *testing.B) {
	c := benchDaemon(b, nil)
	runs := benchRuns(31)
	ctx := context.Background()
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	for b.Loop() {
		for _, rt := range []string{"runc", "runsc"} {
			sb, err := c.Create(ctx, v1.CreateSandboxRequest{Runtime: rt})
			if err != nil {
				b.Fatalf("%s: %v", rt, err)
			}
			ways := map[string]sdk.ExecRequest{
				"login-shell": {Cmd: "/bin/bash", Args: []string{"-l", "-c", "true a b"}},
				"argv":        {Cmd: "true", Args: []string{"a", "b"}},
			}
			times := map[string][]time.Duration{}
			for range runs {
				// Interleaved, so that both see the same host load.
				for _, way := range []string{"login-shell", "argv"} {
					req := ways[way]
					req.Stdout, req.Stderr = io.Discard, io.Discard
					t := time.Now()
					code, err := c.Exec(ctx, sb.ID, req)
					if err != nil || code != 0 {
						b.Fatalf("%s %s: %d %v", rt, way, code, err)
					}
					times[way] = append(times[way], time.Since(t))
				}
			}
			shell, argv := median(times["login-shell"]), median(times["argv"])
			b.ReportMetric(float64(shell.Microseconds())/1000, rt+"-login-shell-ms")
			b.ReportMetric(float64(argv.Microseconds())/1000, rt+"-argv-ms")
			b.ReportMetric(float64((shell-argv).Microseconds())/1000, rt+"-saved-ms")
			if err := c.Delete(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkTemplateRebuild measures, in one daemon, a cold build of a 4-step Dockerfile
// (FROM host; RUN, COPY, RUN, RUN) and a rebuild after editing only its last RUN (three
// layers from the cache), and reports both medians and their ratio (runs per figure:
// MOAT_BENCH_RUNS, default 5; each cold run uses a new name in the RUN so nothing is cached).
func BenchmarkTemplateRebuild(b *testing.B) {
	c := benchDaemon(b, nil)
	runs := benchRuns(5)
	cx := b.TempDir()
	if err := os.WriteFile(filepath.Join(cx, "f"), make([]byte, 1<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	buildOnce := func(df string) (time.Duration, *v1.BuildReport) {
		t := time.Now()
		_, rep, err := c.BuildDockerfile(ctx, v1.DockerfileRequest{Name: "bench", Dockerfile: df, Context: cx}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(t), rep
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	for b.Loop() {
		var cold, warm []time.Duration
		for i := range runs {
			df := fmt.Sprintf("FROM host\nRUN echo %d-%s > /a\nCOPY f /f\nRUN echo b > /b\nRUN echo c > /c\n", i, shortID())
			d, rep := buildOnce(df)
			if rep.Cached != 0 {
				b.Fatalf("cold build used the cache: %+v", rep)
			}
			cold = append(cold, d)
			d, rep = buildOnce(strings.Replace(df, "echo c > /c", "echo edited > /c", 1))
			if rep.Cached != 3 || rep.Built != 1 {
				b.Fatalf("rebuild: %+v", rep)
			}
			warm = append(warm, d)
		}
		cm, wm := median(cold), median(warm)
		b.ReportMetric(float64(cm.Milliseconds()), "cold-ms")
		b.ReportMetric(float64(wm.Milliseconds()), "rebuild-ms")
		b.ReportMetric(float64(wm)/float64(cm), "rebuild/cold")
	}
}
