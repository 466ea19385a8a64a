package e2b_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/testutil"
)

// BenchmarkE2BTemplateRebuild measures, in one daemon and through the e2b SDK's
// Template.build, a cold build of a 4-step template (fromTemplate host; runCmd, copy of
// 1 MiB, runCmd, runCmd) and a rebuild after changing only its last runCmd (three layers
// from the cache), and reports both medians and their ratio (runs: MOAT_BENCH_RUNS,
// default 5).
func BenchmarkE2BTemplateRebuild(b *testing.B) {
	testutil.RequiresRoot(b)
	node := requireNode(b)
	d := startDaemon(b, 0)
	median := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	for b.Loop() {
		cmd := exec.Command(node, "templates_bench.mjs")
		cmd.Dir = suiteDir(b)
		cmd.Env = d.nodeEnv()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			b.Fatalf("templates_bench.mjs: %v\n%s%s", err, out.String(), errb.String())
		}
		var res struct {
			Cold    []float64 `json:"cold_ms"`
			Rebuild []float64 `json:"rebuild_ms"`
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || len(res.Cold) == 0 {
			b.Fatalf("templates_bench.mjs printed %q: %v", out.String(), err)
		}
		cm, wm := median(res.Cold), median(res.Rebuild)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(cm, "cold-ms")
		b.ReportMetric(wm, "rebuild-ms")
		b.ReportMetric(wm/cm, "rebuild/cold")
		b.Logf("E2B Template.build, %d runs: cold median %.0f ms, rebuild (last step changed) median %.0f ms, ratio %.2f; cold %v, rebuild %v",
			len(res.Cold), cm, wm, wm/cm, res.Cold, res.Rebuild)
	}
}
