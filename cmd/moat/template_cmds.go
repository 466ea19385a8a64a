package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
)

// templateRmCmd is `moat template rm NAME [--force]`.
func (a *app) templateRmCmd() *cobra.Command {
	var force, asJSON bool
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a template (refused while sandboxes, warm pools or snapshots use it)",
		Long: `rm removes a stored template and the layers no other template shares.

It refuses while a sandbox (in any state), a warm pool or a snapshot uses the template and
names them. With --force it removes the template anyway: the warm pool's idle sandboxes of
it are deleted, running sandboxes keep running on their mounted layers (removed once they
stop), and stopped sandboxes and snapshots of it cannot start or be restored until a
template of that name exists again. No sandbox or snapshot is deleted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			r, err := c.RemoveTemplate(cmd.Context(), args[0], force)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(r)
			}
			if len(r.Users) > 0 {
				fmt.Fprintf(os.Stderr, "moat: template %s was still used by %s\n", termSafe(r.Name), termSafe(strings.Join(r.Users, ", ")))
			}
			fmt.Println(r.Name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove it even while sandboxes, warm pools or snapshots use it")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// buildContext is --context DIR made absolute ("" stays ""), refused unless a directory.
func buildContext(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("--context %s: not a directory", dir)
	}
	return abs, nil
}

// printBuild prints a finished build: the template's name, or with asJSON the template
// and its build report.
func printBuild(t *v1.Template, rep *v1.BuildReport, asJSON bool) error {
	if asJSON {
		return printJSON(struct {
			Template *v1.Template    `json:"template"`
			Build    *v1.BuildReport `json:"build"`
		}{t, rep})
	}
	fmt.Println(t.Name)
	return nil
}

// buildDockerfile is `moat template build NAME --file Dockerfile [--context DIR]`.
func (a *app) buildDockerfile(cmd *cobra.Command, name, file, contextDir string, asJSON bool) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--file: %w", err)
	}
	req := v1.DockerfileRequest{Name: name, Dockerfile: string(data), File: file}
	if req.Context, err = buildContext(contextDir); err != nil {
		return err
	}
	c, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	t, rep, err := c.BuildDockerfile(cmd.Context(), req, a.progress)
	if err != nil {
		return err
	}
	return printBuild(t, rep, asJSON)
}
