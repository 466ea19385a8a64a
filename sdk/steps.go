package sdk

import (
	"context"

	v1 "github.com/moatdev/moat/api/v1"
)

// BuildSteps builds a template from a steps file (the E2B builder's steps as YAML),
// calling progress with each line; like BuildDockerfile otherwise.
func (c *Client) BuildSteps(ctx context.Context, req v1.StepsRequest, progress func(string)) (*v1.Template, *v1.BuildReport, error) {
	return c.buildStream(ctx, "/v1/templates/steps", req, progress)
}
