package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatdev/moat/internal/errdefs"
)

// cgroupRoot is where the cgroup hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// writeLimits writes res's memory, CPU and pids limits straight into the cgroup files of
// container id (cgroupsPath /moat/<id>, as BuildSpec sets), as runc update would, without
// a runtime invocation. It returns ErrUnavailable when the cgroup directories are not
// where the cgroupfs driver puts them.
func writeLimits(id string, res *specs.LinuxResources, host hostFeatures) error {
	quota := strconv.FormatInt(*res.CPU.Quota, 10)
	period := strconv.FormatUint(*res.CPU.Period, 10)
	mem := strconv.FormatInt(*res.Memory.Limit, 10)
	pids := strconv.FormatInt(*res.Pids.Limit, 10)
	if host.cgroupV2 {
		dir := filepath.Join(cgroupRoot, "moat", id)
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("cgroup of %s: %v: %w", id, err, errdefs.ErrUnavailable)
		}
		return writeAll(dir, [][2]string{
			{"memory.max", mem}, {"memory.swap.max", "0"}, {"cpu.max", quota + " " + period}, {"pids.max", pids},
		})
	}
	memDir := filepath.Join(cgroupRoot, "memory", "moat", id)
	cpuDir := filepath.Join(cgroupRoot, "cpu", "moat", id)
	pidsDir := filepath.Join(cgroupRoot, "pids", "moat", id)
	for _, d := range []string{memDir, cpuDir, pidsDir} {
		if _, err := os.Stat(d); err != nil {
			return fmt.Errorf("cgroup of %s: %v: %w", id, err, errdefs.ErrUnavailable)
		}
	}
	// memory.limit_in_bytes may never exceed memory.memsw.limit_in_bytes: raise memsw
	// first when growing, lower memory first when shrinking.
	memFiles := [][2]string{{"memory.limit_in_bytes", mem}}
	if host.memsw {
		memFiles = [][2]string{{"memory.limit_in_bytes", mem}, {"memory.memsw.limit_in_bytes", mem}}
		if err := writeAll(memDir, memFiles); err != nil {
			memFiles = [][2]string{memFiles[1], memFiles[0]}
		} else {
			memFiles = nil
		}
	}
	if err := writeAll(memDir, memFiles); err != nil {
		return err
	}
	if err := writeAll(cpuDir, [][2]string{{"cpu.cfs_period_us", period}, {"cpu.cfs_quota_us", quota}}); err != nil {
		return err
	}
	return writeAll(pidsDir, [][2]string{{"pids.max", pids}})
}

func writeAll(dir string, files [][2]string) error {
	var errs []error
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(errs...)
}
