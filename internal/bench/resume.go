package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/moatdev/moat/sdk"
)

// resumeAfterIdle times, o.Runs times, an exec's first output in a sandbox the daemon
// stopped for idleness (1 s idle period): the call starts it again first (transparent
// resume). Waiting for each idle stop is not timed.
func resumeAfterIdle(ctx context.Context, c *sdk.Client, o Options, rt string) (Latency, error) {
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
		if err := waitIdleStopped(ctx, c, sb.ID, 30*time.Second); err != nil {
			return Latency{}, err
		}
		fw := &firstWrite{}
		start := time.Now()
		code, err := c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/echo", Args: []string{"ready"}, Stdout: fw, User: "root"})
		if err != nil {
			return Latency{}, fmt.Errorf("exec after the idle stop: %w", err)
		}
		if code != 0 || fw.at.IsZero() {
			return Latency{}, fmt.Errorf("echo after the idle stop exited %d with no output", code)
		}
		ds = append(ds, fw.at.Sub(start))
	}
	return summarize(ds), nil
}

func waitIdleStopped(ctx context.Context, c *sdk.Client, id string, within time.Duration) error {
	for end := time.Now().Add(within); ; {
		sb, err := c.Get(ctx, id)
		if err != nil {
			return err
		}
		if sb.State == "stopped" && sb.StopReason == "idle" {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("sandbox %s was not stopped for idleness within %s (%s)", id, within, sb.State)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// resumeFigures fills r's resume figure and its ratio to the warm create (and to the cold
// one) measured in the same run.
func resumeFigures(ctx context.Context, c *sdk.Client, o Options, rt string, r *RuntimeResult) {
	o.Progress(fmt.Sprintf("%s: %d × exec → first output in a sandbox stopped for idleness (transparent resume)", rt, o.Runs))
	l, err := resumeAfterIdle(ctx, c, o, rt)
	if err != nil {
		r.Error = "resume after idle stop: " + err.Error()
		return
	}
	r.Resume = &l
	if r.Warm != nil && r.Warm.P50 > 0 {
		r.ResumeToWarm = l.P50 / r.Warm.P50
	}
	if r.API.P50 > 0 {
		r.ResumeToCold = l.P50 / r.API.P50
	}
}
