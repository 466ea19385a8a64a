package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Stats reads container id's CPU and memory figures straight from its cgroup (/moat/<id>,
// as BuildSpec sets; no runtime invocation), for runc, crun and runsc alike: runsc puts its
// sandbox process, which runs all of the guest, in the same cgroup. The memory used is the
// working set, usage minus inactive page cache (what cAdvisor reports and the kernel
// reclaims last). Unlimited CPU and memory read as 0. A container without a cgroup is
// ErrNotFound; a host where the cgroup controllers are not where the cgroupfs driver
// puts them is ErrUnavailable; a bad id is ErrInvalidArgument.
func (o *OCI) Stats(ctx context.Context, id string) (sandbox.Stats, error) {
	if !validID(id) {
		return sandbox.Stats{}, fmt.Errorf("stats of container %q: bad id: %w", id, errdefs.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return sandbox.Stats{}, fmt.Errorf("stats of container %s: %w", id, err)
	}
	var (
		s   sandbox.Stats
		err error
	)
	if detectHost().cgroupV2 {
		s, err = statsV2(filepath.Join(cgroupRoot, "moat", id))
	} else {
		s, err = statsV1(id)
	}
	if err != nil {
		return sandbox.Stats{}, fmt.Errorf("stats of container %s: %w", id, err)
	}
	return s, nil
}

// OOMKills returns how many processes the kernel's OOM killer has killed in container id's
// memory cgroup since the cgroup was made (a new start of a sandbox makes a new one):
// cgroup v1 memory.oom_control "oom_kill", v2 memory.events "oom_kill". Under runsc the
// cgroup holds the gVisor sandbox process, so a kill there ends the whole sandbox. Errors
// as for Stats.
func (o *OCI) OOMKills(ctx context.Context, id string) (uint64, error) {
	if !validID(id) {
		return 0, fmt.Errorf("OOM kills of container %q: bad id: %w", id, errdefs.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, err := oomKills(id)
	if err != nil {
		return 0, fmt.Errorf("OOM kills of container %s: %w", id, err)
	}
	return n, nil
}

func oomKills(id string) (uint64, error) {
	if detectHost().cgroupV2 {
		dir := filepath.Join(cgroupRoot, "moat", id)
		if _, err := os.Stat(dir); err != nil {
			return 0, notFound(err)
		}
		return statField(filepath.Join(dir, "memory.events"), "oom_kill")
	}
	dir, err := v1Dir("memory", id)
	if err != nil {
		return 0, err
	}
	return statField(filepath.Join(dir, "memory.oom_control"), "oom_kill")
}

// unlimitedMemory is where a v1 memory limit stops being a limit: "unlimited" reads as
// the page counter's maximum, 9223372036854771712 on 4 KiB pages.
const unlimitedMemory = 1 << 62

// statsV1 reads the cgroup v1 hierarchies memory, cpuacct and cpu of container id.
func statsV1(id string) (sandbox.Stats, error) {
	memDir, err := v1Dir("memory", id)
	if err != nil {
		return sandbox.Stats{}, err
	}
	acctDir, err := v1Dir("cpuacct", id)
	if err != nil {
		return sandbox.Stats{}, err
	}
	cpuDir, err := v1Dir("cpu", id)
	if err != nil {
		return sandbox.Stats{}, err
	}
	s := sandbox.Stats{Time: time.Now()}
	if s.CPUUsageNs, err = readUint(filepath.Join(acctDir, "cpuacct.usage")); err != nil {
		return sandbox.Stats{}, err
	}
	usage, err := readUint(filepath.Join(memDir, "memory.usage_in_bytes"))
	if err != nil {
		return sandbox.Stats{}, err
	}
	inactive, err := statField(filepath.Join(memDir, "memory.stat"), "total_inactive_file")
	if err != nil {
		return sandbox.Stats{}, err
	}
	s.MemoryUsed = workingSet(usage, inactive)
	limit, err := readUint(filepath.Join(memDir, "memory.limit_in_bytes"))
	if err != nil {
		return sandbox.Stats{}, err
	}
	if limit < unlimitedMemory {
		s.MemoryLimit = int64(limit)
	}
	quota, err := readInt(filepath.Join(cpuDir, "cpu.cfs_quota_us"))
	if err != nil {
		return sandbox.Stats{}, err
	}
	period, err := readUint(filepath.Join(cpuDir, "cpu.cfs_period_us"))
	if err != nil {
		return sandbox.Stats{}, err
	}
	if quota > 0 && period > 0 {
		s.CPULimit = float64(quota) / float64(period)
	}
	return s, nil
}

// statsV2 reads the unified cgroup dir of one container.
func statsV2(dir string) (sandbox.Stats, error) {
	if _, err := os.Stat(dir); err != nil {
		return sandbox.Stats{}, notFound(err)
	}
	s := sandbox.Stats{Time: time.Now()}
	usec, err := statField(filepath.Join(dir, "cpu.stat"), "usage_usec")
	if err != nil {
		return sandbox.Stats{}, err
	}
	s.CPUUsageNs = usec * 1000
	usage, err := readUint(filepath.Join(dir, "memory.current"))
	if err != nil {
		return sandbox.Stats{}, err
	}
	inactive, err := statField(filepath.Join(dir, "memory.stat"), "inactive_file")
	if err != nil {
		return sandbox.Stats{}, err
	}
	s.MemoryUsed = workingSet(usage, inactive)
	if max, err := readTrimmed(filepath.Join(dir, "memory.max")); err != nil {
		return sandbox.Stats{}, err
	} else if max != "max" {
		limit, err := strconv.ParseInt(max, 10, 64)
		if err != nil {
			return sandbox.Stats{}, fmt.Errorf("memory.max %q: %w", max, err)
		}
		s.MemoryLimit = limit
	}
	cpuMax, err := readTrimmed(filepath.Join(dir, "cpu.max"))
	if err != nil {
		return sandbox.Stats{}, err
	}
	// "<quota|max> <period>"
	if q, p, ok := strings.Cut(cpuMax, " "); ok && q != "max" {
		quota, err1 := strconv.ParseInt(q, 10, 64)
		period, err2 := strconv.ParseInt(p, 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return sandbox.Stats{}, fmt.Errorf("cpu.max %q: %w", cpuMax, err)
		}
		if quota > 0 && period > 0 {
			s.CPULimit = float64(quota) / float64(period)
		}
	}
	return s, nil
}

// v1Dir returns container id's directory in the v1 hierarchy of controller: under
// <cgroupRoot>/<controller> (a symlink where controllers are co-mounted, as cpu,cpuacct
// often are), or else under wherever /proc/self/mountinfo says controller is mounted.
// ErrNotFound when the directory does not exist, ErrUnavailable when the controller is
// not mounted.
func v1Dir(controller, id string) (string, error) {
	dir := filepath.Join(cgroupRoot, controller, "moat", id)
	_, err := os.Stat(dir)
	if err == nil {
		return dir, nil
	}
	mnt := v1Mountpoint(controller)
	if mnt == "" {
		return "", fmt.Errorf("cgroup v1 controller %s is not mounted: %w", controller, errdefs.ErrUnavailable)
	}
	if mnt != filepath.Join(cgroupRoot, controller) {
		alt := filepath.Join(mnt, "moat", id)
		if _, err := os.Stat(alt); err == nil {
			return alt, nil
		}
	}
	return "", notFound(err)
}

// v1Mountpoint returns where the cgroup v1 hierarchy holding controller is mounted ("" if
// it is not).
func v1Mountpoint(controller string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 || tail[0] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(tail[2], ",") {
			if opt == controller {
				return fields[4]
			}
		}
	}
	return ""
}

// workingSet is usage minus the inactive file cache, never below 0.
func workingSet(usage, inactiveFile uint64) int64 {
	if inactiveFile >= usage {
		return 0
	}
	return int64(usage - inactiveFile)
}

// notFound classes a missing cgroup file or directory as ErrNotFound (the container is
// gone, or going).
func notFound(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%v: %w", err, errdefs.ErrNotFound)
	}
	return err
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", notFound(err)
	}
	return strings.TrimSpace(string(b)), nil
}

func readUint(path string) (uint64, error) {
	s, err := readTrimmed(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func readInt(path string) (int64, error) {
	s, err := readTrimmed(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// statField returns the value of key in a "key value" per line file (memory.stat,
// cpu.stat); a missing key is 0.
func statField(path, key string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, notFound(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, " ")
		if ok && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s %s: %w", path, key, err)
			}
			return n, nil
		}
	}
	return 0, nil
}
