package main

import (
	"fmt"
	"os"
	"path/filepath"

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
	if contextDir != "" {
		if req.Context, err = filepath.Abs(contextDir); err != nil {
			return err
		}
		if fi, err := os.Stat(req.Context); err != nil || !fi.IsDir() {
			return fmt.Errorf("--context %s: not a directory", contextDir)
		}
	}
	c, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	t, rep, err := c.BuildSteps(cmd.Context(), req, a.progress)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(struct {
			Template *v1.Template    `json:"template"`
			Build    *v1.BuildReport `json:"build"`
		}{t, rep})
	}
	fmt.Println(t.Name)
	return nil
}
