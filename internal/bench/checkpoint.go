package bench

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// CheckpointResult is the checkpoint figure for one runtime: `moat checkpoint` and the
// restore of that checkpoint (moat restore) p50, beside stop+start of the same sandbox in
// the same run — the baseline a checkpoint/restore competes with (both free the memory and
// bring the sandbox back; a memory checkpoint would also bring its processes back).
// Method and Reason say what the checkpoint was: "filesystem" (and why not "memory") on
// hosts where the runtime cannot save a moat sandbox's memory.
type CheckpointResult struct {
	Runtime    string  `json:"runtime"`
	Method     string  `json:"method"`
	Reason     string  `json:"reason,omitempty"`
	Checkpoint Latency `json:"checkpoint"`
	Restore    Latency `json:"restore"`    // moat restore ID SNAP: stop, drive swap, start
	StopStart  Latency `json:"stop_start"` // baseline
	// Ratios to the baseline, p50.
	CheckpointRatio float64 `json:"checkpoint_ratio_p50"`
	RestoreRatio    float64 `json:"restore_ratio_p50"`
}

// Checkpoints measures checkpoint, restore and stop+start p50 (runs each) of one sandbox
// of runtime rt with a process running in it. It deletes what it makes.
func Checkpoints(ctx context.Context, c *sdk.Client, rt string, runs int, diskBytes int64, progress func(string)) (*CheckpointResult, error) {
	res := &CheckpointResult{Runtime: rt}
	sb, err := c.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 256 << 20, DiskBytes: diskBytes})
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), sb.ID) }()
	busy := func() error {
		var errb limited
		code, err := c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c",
			`mkdir -p ~/ck && nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > ~/ck/count; sleep 0.1; done' >/dev/null 2>&1 &`}, Stderr: &errb})
		if err != nil || code != 0 {
			return fmt.Errorf("starting the sandbox's process: %v (exit %d) %s", err, code, errb.String())
		}
		return nil
	}
	if err := busy(); err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("checkpoints: %s, %d runs each of checkpoint, restore, stop+start", rt, runs))
	var cps, restores, stopStarts []time.Duration
	var keep string
	for i := range runs {
		t0 := time.Now()
		cp, err := c.Checkpoint(ctx, sb.ID, "")
		if err != nil {
			return nil, err
		}
		cps = append(cps, time.Since(t0))
		res.Method, res.Reason = cp.Method, cp.Reason
		if i == 0 {
			keep = cp.Snapshot.ID
			continue
		}
		if err := c.DeleteSnapshot(ctx, cp.Snapshot.ID); err != nil {
			return nil, err
		}
	}
	defer func() { _ = c.DeleteSnapshot(context.WithoutCancel(ctx), keep) }()
	for range runs {
		t0 := time.Now()
		if _, err := c.Restore(ctx, sb.ID, keep); err != nil {
			return nil, err
		}
		restores = append(restores, time.Since(t0))
		if err := busy(); err != nil {
			return nil, err
		}
	}
	for range runs {
		t0 := time.Now()
		if _, err := c.Stop(ctx, sb.ID); err != nil {
			return nil, err
		}
		if _, err := c.Start(ctx, sb.ID); err != nil {
			return nil, err
		}
		stopStarts = append(stopStarts, time.Since(t0))
		if err := busy(); err != nil {
			return nil, err
		}
	}
	res.Checkpoint, res.Restore, res.StopStart = summarize(cps), summarize(restores), summarize(stopStarts)
	if res.StopStart.P50 > 0 {
		res.CheckpointRatio = res.Checkpoint.P50 / res.StopStart.P50
		res.RestoreRatio = res.Restore.P50 / res.StopStart.P50
	}
	return res, nil
}
