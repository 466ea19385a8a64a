package storage

import (
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/linux"
)

// TestDriveMountConcurrent creates and mounts 50 drives of the default size at once, as 50
// cold sandbox creates do: every mount succeeds on a loop device of its own, and once
// unmounted none of their loop devices stays attached. Before the fix, creates that lost
// the race for the loop device LOOP_CTL_GET_FREE handed to all of them failed with
// "device or resource busy".
func TestDriveMountConcurrent(t *testing.T) {
	s, run := newTestStore(t)
	// Sparse drives, as before drives were allocated in full: 50 allocated 10 GiB drives
	// would not fit the disk, and the race is in the attach, not in the allocation.
	s.SetDiskPolicy(DiskPolicy{Overcommit: true})
	ctx := ctxT(t)
	const n = 50
	ids := make([]string, n)
	targets := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("sb-%012d", 500+i)
		targets[i] = filepath.Join(run, "sandboxes", ids[i], "drive")
	}
	t.Cleanup(func() {
		for _, target := range targets {
			_ = linux.UnmountAll(target)
		}
	})
	// The drive template exists already, as after the first create.
	if err := s.CreateDrive(ctx, "sb-000000000499", 10<<30); err != nil {
		t.Fatal(err)
	}

	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			if errs[i] = s.CreateDrive(ctx, ids[i], 10<<30); errs[i] != nil {
				return
			}
			errs[i] = s.loops.MountImage(s.drivePath(ids[i]), targets[i], "ext4", syscall.MS_NODEV|syscall.MS_NOSUID, "")
		})
	}
	close(start)
	wg.Wait()
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			t.Errorf("drive %d: %v", i, err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d concurrent drive mounts failed", failed, n)
	}
	devs := map[string]int{}
	for i := range n {
		if errs[i] != nil {
			continue
		}
		dev, err := linux.LoopDeviceOf(s.drivePath(ids[i]))
		if err != nil || dev == "" {
			t.Fatalf("loop device of mounted drive %d: %q, %v", i, dev, err)
		}
		if j, ok := devs[dev]; ok {
			t.Errorf("drives %d and %d share %s", j, i, dev)
		}
		devs[dev] = i
	}
	for i, target := range targets {
		if err := linux.UnmountAll(target); err != nil {
			t.Errorf("unmounting drive %d: %v", i, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := range n {
		for {
			dev, err := linux.LoopDeviceOf(s.drivePath(ids[i]))
			if err != nil {
				t.Fatal(err)
			}
			if dev == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("loop device %s of drive %d still attached after unmount", dev, i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
