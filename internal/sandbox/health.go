package sandbox

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Health of a sandbox's moat-init, through its gateway.

// waitHealthy polls moat-init's /health through the gateway until it answers.
func (m *Manager) waitHealthy(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.HealthTimeout)
	defer cancel()
	// moat-init needs ~20 ms to listen under runc and 50–80 ms under the current runsc
	// (0.5 s under the 2022 one): poll every 3 ms for the first 250 ms, then back off
	// (each poll is a dial through the gateway, refused at once while nothing listens; a
	// burst of creates on a busy host must not spend its CPU on polling).
	start := time.Now()
	delay := 3 * time.Millisecond
	var last error
	for {
		last = m.health(ctx, id)
		if last == nil {
			return nil
		}
		if time.Since(start) > 250*time.Millisecond {
			delay = min(delay*2, 50*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(delay):
		}
	}
}

func (m *Manager) health(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+id+"/health", nil)
	resp, err := m.envd.RoundTrip(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}
