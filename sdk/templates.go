package sdk

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// RemoveTemplate deletes template name. Without force the daemon refuses (a *Error with
// code "conflict" naming them) while sandboxes, warm pools or snapshots use it.
func (c *Client) RemoveTemplate(ctx context.Context, name string, force bool) (*v1.TemplateRemoval, error) {
	var out v1.TemplateRemoval
	p := "/v1/templates/" + url.PathEscape(name)
	if force {
		p += "?force=true"
	}
	if err := c.do(ctx, http.MethodDelete, p, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BuildDockerfile builds a template from a Dockerfile, calling progress for each progress
// line, and returns the template and the build's report.
func (c *Client) BuildDockerfile(ctx context.Context, req v1.DockerfileRequest, progress func(string)) (*v1.Template, *v1.BuildReport, error) {
	return c.buildStream(ctx, "/v1/templates/dockerfile", req, progress)
}

// buildStream posts a build request to path and reads its NDJSON progress to the result.
func (c *Client) buildStream(ctx context.Context, path string, req any, progress func(string)) (*v1.Template, *v1.BuildReport, error) {
	resp, err := c.send(ctx, http.MethodPost, path, req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var p v1.Progress
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, nil, fmt.Errorf("decoding progress: %w", err)
		}
		if p.Done {
			if p.Error != "" {
				return nil, nil, errors.New(p.Error)
			}
			return p.Result, p.Build, nil
		}
		if progress != nil {
			progress(p.Message)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	return nil, nil, errors.New("template build ended without a result")
}
