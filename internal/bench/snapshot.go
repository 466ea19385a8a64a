package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// SnapshotResult is the snapshot and fork figure: p50s for a sandbox with an empty
// workspace and for one with WorkspaceMiB written, measured in the same run, with a cold
// create of the same sandbox as the baseline of a fork (a fork starts a sandbox).
type SnapshotResult struct {
	Runtime      string  `json:"runtime"`
	Method       string  `json:"method"` // "reflink" (drive pool) or "copy"
	WorkspaceMiB int     `json:"workspace_mib"`
	SnapEmpty    Latency `json:"snapshot_empty"`
	SnapFull     Latency `json:"snapshot_full"`
	SnapRatio    float64 `json:"snapshot_ratio_p50"` // full / empty
	ForkEmpty    Latency `json:"fork_empty"`
	ForkFull     Latency `json:"fork_full"`
	ForkRatio    float64 `json:"fork_ratio_p50"` // full / empty
	// LazyEmpty and LazyFull are `fork --lazy` (made stopped, started by its first use):
	// the call itself, and FirstUse the first exec's output after it (the start).
	LazyEmpty    Latency `json:"fork_lazy_empty"`
	LazyFull     Latency `json:"fork_lazy_full"`
	LazyRatio    float64 `json:"fork_lazy_ratio_p50"` // full / empty
	LazyFirstUse Latency `json:"fork_lazy_first_exec"`
	// Create is a cold create (to running) of the same sandbox: what a fork adds to its
	// snapshot.
	Create Latency `json:"create_baseline"`
}

// Snapshots measures snapshot and fork p50 (runs each) on sandboxes of runtime rt whose
// drives are diskBytes, first with an empty workspace, then with workspaceMiB written.
// It deletes what it makes.
func Snapshots(ctx context.Context, c *sdk.Client, rt string, runs, workspaceMiB int, diskBytes int64, progress func(string)) (*SnapshotResult, error) {
	res := &SnapshotResult{Runtime: rt, WorkspaceMiB: workspaceMiB}
	req := v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 256 << 20, DiskBytes: diskBytes}
	var creates []time.Duration
	for range max(runs/2, 5) {
		t0 := time.Now()
		sb, err := c.Create(ctx, req)
		if err != nil {
			return nil, err
		}
		creates = append(creates, time.Since(t0))
		_ = c.Delete(ctx, sb.ID)
	}
	res.Create = summarize(creates)
	var firstUses []time.Duration
	measure := func(fill int) (snap, fork, lazy Latency, err error) {
		sb, err := c.Create(ctx, req)
		if err != nil {
			return snap, fork, lazy, err
		}
		defer func() { _ = c.Delete(context.WithoutCancel(ctx), sb.ID) }()
		if fill > 0 {
			progress(fmt.Sprintf("snapshots: writing %d MiB into the workspace", fill))
			var out, errb limited
			code, err := c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c",
				fmt.Sprintf("mkdir -p ~/ws && head -c %dM /dev/urandom > ~/ws/blob && sync", fill)}, Stdout: &out, Stderr: &errb})
			if err != nil || code != 0 {
				return snap, fork, lazy, fmt.Errorf("filling the workspace: %v (exit %d) %s", err, code, errb.String())
			}
		}
		var snaps, forks []time.Duration
		for range runs {
			t0 := time.Now()
			sn, err := c.Snapshot(ctx, sb.ID, "")
			if err != nil {
				return snap, fork, lazy, err
			}
			snaps = append(snaps, time.Since(t0))
			res.Method = sn.Method
			if err := c.DeleteSnapshot(ctx, sn.ID); err != nil {
				return snap, fork, lazy, err
			}
		}
		for range runs {
			t0 := time.Now()
			rep, err := c.Fork(ctx, sb.ID, 1)
			if err != nil {
				return snap, fork, lazy, err
			}
			forks = append(forks, time.Since(t0))
			for _, f := range rep.Forks {
				deleted(ctx, c, f.ID)
			}
		}
		var lazies []time.Duration
		for range runs {
			t0 := time.Now()
			rep, err := c.ForkWith(ctx, sb.ID, v1.ForkRequest{Count: 1, Lazy: true})
			if err != nil {
				return snap, fork, lazy, err
			}
			lazies = append(lazies, time.Since(t0))
			for _, f := range rep.Forks {
				t1 := time.Now()
				var out, errb limited
				if code, err := c.Exec(ctx, f.ID, sdk.ExecRequest{Cmd: "/bin/true", Stdout: &out, Stderr: &errb}); err != nil || code != 0 {
					return snap, fork, lazy, fmt.Errorf("first exec in a lazy fork: %v (exit %d) %s", err, code, errb.String())
				}
				firstUses = append(firstUses, time.Since(t1))
				deleted(ctx, c, f.ID)
			}
		}
		return summarize(snaps), summarize(forks), summarize(lazies), nil
	}
	var err error
	progress(fmt.Sprintf("snapshots: %d × snapshot and fork of a %s sandbox with an empty workspace", runs, rt))
	if res.SnapEmpty, res.ForkEmpty, res.LazyEmpty, err = measure(0); err != nil {
		return res, err
	}
	progress(fmt.Sprintf("snapshots: %d × snapshot and fork of a %s sandbox with %d MiB in its workspace", runs, rt, workspaceMiB))
	if res.SnapFull, res.ForkFull, res.LazyFull, err = measure(workspaceMiB); err != nil {
		return res, err
	}
	if res.SnapEmpty.P50 > 0 {
		res.SnapRatio = res.SnapFull.P50 / res.SnapEmpty.P50
	}
	if res.ForkEmpty.P50 > 0 {
		res.ForkRatio = res.ForkFull.P50 / res.ForkEmpty.P50
	}
	if res.LazyEmpty.P50 > 0 {
		res.LazyRatio = res.LazyFull.P50 / res.LazyEmpty.P50
	}
	res.LazyFirstUse = summarize(firstUses)
	return res, nil
}

// deleted deletes sandbox id and waits (up to a minute) until its teardown, which runs in
// the daemon's background, is over: the next timed call must not share the machine with it.
func deleted(ctx context.Context, c *sdk.Client, id string) {
	if err := c.Delete(ctx, id); err != nil {
		return
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := c.Get(ctx, id); errors.Is(err, sdk.ErrNotFound) {
			return
		}
	}
}

// limited keeps the first 4 KiB written to it.
type limited struct{ b []byte }

func (l *limited) Write(p []byte) (int, error) {
	if n := 4096 - len(l.b); n > 0 {
		l.b = append(l.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (l *limited) String() string { return string(l.b) }
