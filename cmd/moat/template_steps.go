package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
)

// buildStepsFile is `moat template build NAME --steps steps.yaml [--context DIR]`: the E2B
// template builder's steps as YAML (docs/e2b-templates.md).
func (a *app) buildStepsFile(cmd *cobra.Command, name, file, dockerfile, contextDir string, asJSON bool) error {
	if dockerfile != "" || cmd.Flags().Changed("mirror") {
		return fmt.Errorf("--steps builds from a steps file: --file and --mirror do not go with it")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--steps: %w", err)
	}
	req := v1.StepsRequest{Name: name, Steps: string(data), File: file}
	if req.Context, err = buildContext(contextDir); err != nil {
		return err
	}
	c, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	t, rep, err := c.BuildSteps(cmd.Context(), req, a.progress)
	if err != nil {
		return err
	}
	return printBuild(t, rep, asJSON)
}
