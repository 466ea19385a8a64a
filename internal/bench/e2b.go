package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// E2BTarget is a daemon's E2B-compatible API (its TCP listener) with an API key, for the
// E2B create figure: the calls an E2B SDK's Sandbox.create() and kill() make.
type E2BTarget struct {
	URL      string // http://ADDR
	Key      string // an API key (e2b_…)
	Template string // E2B template name ("base")
	Runtime  string // the runtime its creates get (the daemon's default): the pool waited for
}

// e2bCreates times POST /sandboxes (what Sandbox.create() sends and waits for) for template
// t.Template, runs times, each after wait returns (the warm pool has refilled, as between
// a user's creates), deleting each sandbox (untimed). One uncounted run first opens the
// connection, as a long-lived SDK client has it open.
func e2bCreates(ctx context.Context, t E2BTarget, runs int, wait func()) ([]time.Duration, error) {
	hc := &http.Client{Timeout: time.Minute}
	do := func(method, path string, body any) ([]byte, int, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, t.URL+path, rd)
		if err != nil {
			return nil, 0, err
		}
		req.Header.Set("X-API-KEY", t.Key)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return data, resp.StatusCode, err
	}
	var out []time.Duration
	for i := range runs + 1 {
		wait()
		start := time.Now()
		data, code, err := do(http.MethodPost, "/sandboxes", map[string]any{"templateID": t.Template, "timeout": 300})
		d := time.Since(start)
		if err != nil {
			return nil, err
		}
		var sb struct {
			SandboxID string `json:"sandboxID"`
		}
		if code != http.StatusCreated && code != http.StatusOK || json.Unmarshal(data, &sb) != nil || sb.SandboxID == "" {
			return nil, fmt.Errorf("POST /sandboxes: %d %s", code, data)
		}
		if _, code, err := do(http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil); err != nil || code/100 != 2 {
			return nil, fmt.Errorf("DELETE /sandboxes/%s: %d %v", sb.SandboxID, code, err)
		}
		if i > 0 {
			out = append(out, d)
		}
	}
	return out, nil
}
