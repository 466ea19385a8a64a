package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/moatdev/moat/sdk"
)

// IdleFreeze is the freeze period of the daemon the resume figures need: its idle
// sandboxes are frozen after their 1 s idle period and stopped 2 s later, so both the thaw
// and the start are timed in one run.
const IdleFreeze = 2 * time.Second

// resumeAfterIdle times, o.Runs times, an exec's first output in a sandbox the daemon
// froze (state "paused") or stopped (state "stopped") for idleness, 1 s idle period: the
// call thaws or starts it first (transparent resume). Waiting for the freeze or stop is not
// timed.
func resumeAfterIdle(ctx context.Context, c *sdk.Client, o Options, rt, state string) (Latency, error) {
	one := int64(1)
	req := smallSandbox
	req.Runtime, req.IdleSeconds = rt, &one
	sb, err := c.Create(ctx, req)
	if err != nil {
		return Latency{}, err
	}
	defer c.Delete(context.WithoutCancel(ctx), sb.ID)
	var ds []time.Duration
	for range o.Runs {
		if err := waitIdle(ctx, c, sb.ID, state, 30*time.Second); err != nil {
			return Latency{}, err
		}
		fw := &firstWrite{}
		start := time.Now()
		code, err := c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/echo", Args: []string{"ready"}, Stdout: fw, User: "root"})
		if err != nil {
			return Latency{}, fmt.Errorf("exec after the idle %s: %w", state, err)
		}
		if code != 0 || fw.at.IsZero() {
			return Latency{}, fmt.Errorf("echo after the idle %s exited %d with no output", state, code)
		}
		ds = append(ds, fw.at.Sub(start))
	}
	return summarize(ds), nil
}

// waitIdle waits until sandbox id is in state for idleness.
func waitIdle(ctx context.Context, c *sdk.Client, id, state string, within time.Duration) error {
	for end := time.Now().Add(within); ; {
		sb, err := c.Get(ctx, id)
		if err != nil {
			return err
		}
		if sb.State == state && sb.StopReason == "idle" {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("sandbox %s was not %s for idleness within %s (%s)", id, state, within, sb.State)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// resumeFigures fills r's resume figures (after an idle freeze, after an idle stop) and
// their ratios to the warm and the cold create measured in the same run.
func resumeFigures(ctx context.Context, c *sdk.Client, o Options, rt string, r *RuntimeResult) {
	o.Progress(fmt.Sprintf("%s: %d × exec → first output in a sandbox frozen for idleness (thaw)", rt, o.Runs))
	thaw, err := resumeAfterIdle(ctx, c, o, rt, "paused")
	if err != nil {
		r.Error = strings.TrimPrefix(r.Error+"; resume after idle freeze: "+err.Error(), "; ")
		return
	}
	r.Thaw = &thaw
	o.Progress(fmt.Sprintf("%s: %d × exec → first output in a sandbox stopped for idleness (start)", rt, o.Runs))
	l, err := resumeAfterIdle(ctx, c, o, rt, "stopped")
	if err != nil {
		r.Error = strings.TrimPrefix(r.Error+"; resume after idle stop: "+err.Error(), "; ")
		return
	}
	r.Resume = &l
	if r.Warm != nil && r.Warm.P50 > 0 {
		r.ResumeToWarm = l.P50 / r.Warm.P50
		r.ThawToWarm = thaw.P50 / r.Warm.P50
	}
	if r.API.P50 > 0 {
		r.ResumeToCold = l.P50 / r.API.P50
	}
}
