package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	v1 "github.com/moatdev/moat/api/v1"
)

// ListFiltered returns the sandboxes every filter matches ("name=NAME", "state=STATE",
// "template=TEMPLATE", "label=KEY", "label=KEY=VALUE"; none: all).
func (c *Client) ListFiltered(ctx context.Context, filters []string) ([]v1.Sandbox, error) {
	path := "/v1/sandboxes"
	if len(filters) > 0 {
		path += "?" + url.Values{"filter": filters}.Encode()
	}
	var out []v1.Sandbox
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// Prune deletes the caller's stopped sandboxes that req's filters match (with DryRun, only
// lists them).
func (c *Client) Prune(ctx context.Context, req v1.PruneRequest) (*v1.PruneResponse, error) {
	var out v1.PruneResponse
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/prune", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Stats samples a running or paused sandbox (CPU over 200 ms, memory, drive, tasks,
// network counters).
func (c *Client) Stats(ctx context.Context, id string) (*v1.SandboxStats, error) {
	var out v1.SandboxStats
	if err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/stats", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ProcessLogs lists the processes whose output sandbox id's moat-init keeps.
func (c *Client) ProcessLogs(ctx context.Context, id string) ([]v1.ProcessLog, error) {
	var out []v1.ProcessLog
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/logs", nil, &out)
	return out, err
}

// Logs passes the kept output of one process of sandbox id (pid, or when 0 the newest
// process tagged tag) to fn, chunk by chunk, ending with its End chunk once it has ended;
// with follow it waits for more output until the process ends or ctx is done.
func (c *Client) Logs(ctx context.Context, id string, pid uint32, tag string, follow bool, fn func(v1.LogChunk) error) error {
	q := url.Values{}
	if pid != 0 {
		q.Set("pid", strconv.FormatUint(uint64(pid), 10))
	} else {
		q.Set("tag", tag)
	}
	if follow {
		q.Set("follow", "1")
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/logs?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ch v1.LogChunk
		if err := dec.Decode(&ch); err == io.EOF {
			return nil
		} else if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("reading the logs of sandbox %s: %w", id, err)
		}
		if err := fn(ch); err != nil {
			return err
		}
	}
}
