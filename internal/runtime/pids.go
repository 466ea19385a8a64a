package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

var _ sandbox.PidsCounter = (*OCI)(nil)

// Pids returns container id's task count, its pids limit (0: none) and how often a fork
// failed at that limit, from its pids cgroup (v1 pids.current, pids.max, pids.events "max";
// v2 the same files). Under runsc the cgroup holds gVisor's own host threads, not the
// guest's processes: the count comes from `runsc events --stats` (gVisor's view of the
// guest's tasks; the limit from the cgroup; no limit-hit counter, LimitHits 0). Errors as
// for Stats.
func (o *OCI) Pids(ctx context.Context, id string) (sandbox.PidsStats, error) {
	if !validID(id) {
		return sandbox.PidsStats{}, fmt.Errorf("pids of container %q: bad id: %w", id, errdefs.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return sandbox.PidsStats{}, err
	}
	dir := filepath.Join(cgroupRoot, "moat", id)
	if !detectHost().cgroupV2 {
		var err error
		if dir, err = v1Dir("pids", id); err != nil {
			return sandbox.PidsStats{}, fmt.Errorf("pids of container %s: %w", id, err)
		}
	}
	p, err := readPids(dir)
	if err != nil {
		return sandbox.PidsStats{}, fmt.Errorf("pids of container %s: %w", id, err)
	}
	if o.name == "runsc" {
		out, err := o.control(ctx, id, []string{"events", "--stats", id})
		if err != nil {
			return sandbox.PidsStats{}, fmt.Errorf("pids of container %s: %w", id, err)
		}
		n, err := runscPids(out)
		if err != nil {
			return sandbox.PidsStats{}, fmt.Errorf("pids of container %s: %w", id, err)
		}
		p.Current, p.LimitHits = n, 0
	}
	return p, nil
}

// readPids reads a pids cgroup directory.
func readPids(dir string) (sandbox.PidsStats, error) {
	var p sandbox.PidsStats
	var err error
	if p.Current, err = readUint(filepath.Join(dir, "pids.current")); err != nil {
		return p, err
	}
	max, err := readTrimmed(filepath.Join(dir, "pids.max"))
	if err != nil {
		return p, err
	}
	if max != "max" {
		if p.Limit, err = strconv.ParseUint(max, 10, 64); err != nil {
			return p, fmt.Errorf("pids.max %q: %w", max, err)
		}
	}
	if p.LimitHits, err = statField(filepath.Join(dir, "pids.events"), "max"); err != nil {
		return p, err
	}
	return p, nil
}

// runscPids reads the guest's task count from `runsc events --stats` output: one JSON
// object {"type":"stats","data":{"pids":{"current":N,...},...}}. It is pure.
func runscPids(out []byte) (uint64, error) {
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Pids *struct {
				Current uint64 `json:"current"`
			} `json:"pids"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &ev); err != nil {
		return 0, fmt.Errorf("runsc events --stats: %v: %w", err, errdefs.ErrUnavailable)
	}
	if ev.Type != "stats" || ev.Data.Pids == nil {
		return 0, fmt.Errorf("runsc events --stats gave no task count: %w", errdefs.ErrUnavailable)
	}
	return ev.Data.Pids.Current, nil
}
