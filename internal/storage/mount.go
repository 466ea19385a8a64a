package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

// Mount assembles the root filesystem of sandbox req.ID at req.Target. With run =
// filepath.Dir(req.Target) (the sandbox's run directory):
//
//	run/drive      the sandbox's drive (ext4 image on a loop device), mounted nodev,nosuid
//	run/lower/N    each layer, read-only, nodev,nosuid, idmapped through req.UserNS (plain
//	               without one)
//	req.Target     overlay of part "/": lowers = req.Extra then the template's "/" layers,
//	               upper and work in drive/root/
//	req.Target/P   overlay of each other part P, upper and work in drive/<P>/
//
// The overlays are nodev, and nosuid unless req.UserNS is set (see overlayFlags). run is
// created root-only if missing; who may enter it is the caller's decision.
//
// Upper directories are created on first use, owned by req.RootUID (the sandbox's root as
// the host sees it); later mounts find them, and the data written before, again. Part mount
// points inside the root filesystem must be real directories there (a sandbox that
// replaced /usr by a symlink cannot redirect the mount): otherwise ErrConflict. A missing
// drive gives ErrNotFound, a root filesystem already mounted ErrConflict. On error nothing
// stays mounted. Unless the store overcommits, a drive that is not allocated in full (made
// sparse by an older moat or an overcommitting run) is allocated first, if there is room.
func (s *Store) Mount(ctx context.Context, req sandbox.MountRequest) (err error) {
	if err := validSandboxID(req.ID); err != nil {
		return err
	}
	run, err := s.runDirOf(req.ID, req.Target)
	if err != nil {
		return err
	}
	parts, err := planParts(req)
	if err != nil {
		return err
	}
	fi, err := s.drives.Lstat(req.ID + ".img")
	if err != nil {
		return fmt.Errorf("drive of sandbox %s: %w", req.ID, errdefs.ErrNotFound)
	}
	s.allocateSparse(req.ID, fi)
	// One sandbox's mounts are serialized (a drive image must never be attached twice);
	// different sandboxes mount in parallel.
	unlock, err := s.locks.lock(ctx, "mount/"+req.ID)
	if err != nil {
		return err
	}
	defer unlock()
	if linux.IsMountPoint(req.Target) {
		return fmt.Errorf("root filesystem of sandbox %s is already mounted: %w", req.ID, errdefs.ErrConflict)
	}
	// Leftovers of an interrupted Mount (the drive's loop device is reused, never doubled).
	if err := unmountStorage(run, req.Target); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = unmountStorage(run, req.Target)
		}
	}()
	if err := os.MkdirAll(run, 0o700); err != nil {
		return err
	}
	driveDir := filepath.Join(run, "drive")
	if err := s.loops.MountImage(s.drivePath(req.ID), driveDir, "ext4",
		syscall.MS_NODEV|syscall.MS_NOSUID|syscall.MS_NOATIME, s.driveMountData()); err != nil {
		return fmt.Errorf("mounting drive of sandbox %s: %w", req.ID, err)
	}
	// A drive cloned from a snapshot becomes this sandbox's (snapshot.go).
	if err := adoptDrive(driveDir, req.ID, req.RootUID); err != nil {
		return fmt.Errorf("drive of sandbox %s: %w", req.ID, err)
	}
	drive, err := os.OpenRoot(driveDir)
	if err != nil {
		return err
	}
	defer drive.Close()

	n := 0
	flags := overlayFlags(req.UserNS != "")
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		upper, work, err := partDirs(drive, driveDir, p, req.RootUID)
		if err != nil {
			return fmt.Errorf("preparing drive of sandbox %s for %s: %w", req.ID, p.target, err)
		}
		lowers := make([]string, 0, len(p.layers))
		for _, l := range p.layers {
			dst := filepath.Join(run, "lower", strconv.Itoa(n))
			n++
			if err := linux.IDMapMount(l, dst, req.UserNS); err != nil {
				return fmt.Errorf("mounting layer %s: %w", l, err)
			}
			lowers = append(lowers, dst)
		}
		if p.target == "/" {
			err = linux.Overlay(req.Target, lowers, upper, work, flags)
		} else {
			err = overlayInside(req.Target, p.target, int(req.RootUID), lowers, upper, work, flags)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Unmount undoes Mount for sandbox id whose root is target: the overlays at and below
// target, the layers under run/lower and the drive at run/drive (its loop device detaches
// itself). It touches nothing else in the run directory, ignores ctx (teardown must
// finish) and is idempotent.
func (s *Store) Unmount(ctx context.Context, id string, target string) error {
	if err := validSandboxID(id); err != nil {
		return err
	}
	run, err := s.runDirOf(id, target)
	if err != nil {
		return err
	}
	unlock, _ := s.locks.lock(context.Background(), "mount/"+id) // teardown must finish
	defer unlock()
	if err := unmountStorage(run, target); err != nil {
		return fmt.Errorf("unmounting root filesystem of sandbox %s: %w", id, err)
	}
	return nil
}

// unmountStorage detaches everything Mount makes for the run directory run and removes the
// (then empty) mount point directories.
func unmountStorage(run, target string) error {
	lower, drive := filepath.Join(run, "lower"), filepath.Join(run, "drive")
	var errs []error
	for _, d := range []string{target, lower, drive} {
		if err := linux.UnmountAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Plain rmdir only: a directory that is still a mount point or not empty stays.
	if entries, err := os.ReadDir(lower); err == nil {
		for _, e := range entries {
			_ = os.Remove(filepath.Join(lower, e.Name()))
		}
	}
	_ = os.Remove(lower)
	_ = os.Remove(drive)
	return nil
}

// runDirOf checks target and returns its run directory, which must be
// <runDir>/sandboxes/<id> when the store has a run directory.
func (s *Store) runDirOf(id, target string) (string, error) {
	if !filepath.IsAbs(target) || filepath.Clean(target) != target || strings.ContainsAny(target, ",:\x00") {
		return "", fmt.Errorf("mount target %q must be a clean absolute path without ',' or ':': %w", target, errdefs.ErrInvalidArgument)
	}
	run := filepath.Dir(target)
	if run == "/" || target == "/" {
		return "", fmt.Errorf("mount target %q: %w", target, errdefs.ErrInvalidArgument)
	}
	if s.runDir != "" && run != filepath.Join(s.runDir, "sandboxes", id) {
		return "", fmt.Errorf("mount target %q is not inside the run directory of sandbox %s: %w", target, id, errdefs.ErrInvalidArgument)
	}
	return run, nil
}

// mountPart is one overlay to mount: its target and lowers (first = topmost).
type mountPart struct {
	target string
	layers []string
	ref    string // the template's topmost layer of this part (below any extra layers)
}

// planParts validates req's parts and orders them so that a part is mounted after the one
// containing its mount point.
func planParts(req sandbox.MountRequest) ([]mountPart, error) {
	var parts []mountPart
	seen := map[string]bool{}
	for _, p := range req.Template.Parts {
		if err := validPartTarget(p.Target); err != nil {
			return nil, err
		}
		if seen[p.Target] {
			return nil, fmt.Errorf("template %s: part %s twice: %w", req.Template.Name, p.Target, errdefs.ErrInvalidArgument)
		}
		seen[p.Target] = true
		mp := mountPart{target: p.Target}
		if p.Target == "/" {
			for _, l := range req.Extra {
				mp.layers = append(mp.layers, l.Path)
			}
		}
		mp.layers = append(mp.layers, p.Layers...)
		if len(p.Layers) > 0 {
			mp.ref = p.Layers[0]
		}
		if len(mp.layers) == 0 {
			return nil, fmt.Errorf("template %s: part %s has no layers: %w", req.Template.Name, p.Target, errdefs.ErrInvalidArgument)
		}
		for _, l := range mp.layers {
			if !filepath.IsAbs(l) {
				return nil, fmt.Errorf("layer %q is not an absolute path: %w", l, errdefs.ErrInvalidArgument)
			}
			if fi, err := os.Stat(l); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("layer %s is missing: %w", l, errdefs.ErrUnavailable)
			}
		}
		parts = append(parts, mp)
	}
	if !seen["/"] {
		return nil, fmt.Errorf("template %s has no part \"/\": %w", req.Template.Name, errdefs.ErrInvalidArgument)
	}
	sort.SliceStable(parts, func(i, j int) bool { return depth(parts[i].target) < depth(parts[j].target) })
	return parts, nil
}

func depth(t string) int {
	if t == "/" {
		return 0
	}
	return strings.Count(t, "/")
}

// driveDirName names a part's directory on the drive: "root" for "/", else the target
// without its leading slash, inner slashes as '+' ("/usr/local" → "usr+local"); a part
// "/root" becomes "+root" so it cannot meet the "/" part's directory.
func driveDirName(target string) string {
	if target == "/" {
		return "root"
	}
	n := strings.ReplaceAll(strings.TrimPrefix(target, "/"), "/", "+")
	if n == "root" {
		n = "+root"
	}
	return n
}

// partDirs makes (first time) drive/<name>/{upper,work} for part p and returns their host
// paths. A new upper takes the mode of the part's topmost template layer root and belongs
// to rootUID plus that root's owner (the ownership the sandbox sees on its lowers).
func partDirs(drive *os.Root, driveDir string, p mountPart, rootUID uint32) (upper, work string, err error) {
	name := driveDirName(p.target)
	if err := drive.MkdirAll(name+"/work", 0o700); err != nil {
		return "", "", err
	}
	up := name + "/upper"
	if _, err := drive.Lstat(up); errors.Is(err, fs.ErrNotExist) {
		mode, uid, gid := fs.FileMode(0o755), uint32(0), uint32(0)
		// The template's own root decides (not a repository layer on top of it).
		if fi, err := os.Stat(p.ref); p.ref != "" && err == nil {
			mode = fi.Mode() & (fs.ModePerm | fs.ModeSticky)
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid < 65536 && st.Gid < 65536 {
				uid, gid = st.Uid, st.Gid
			}
		}
		if err := drive.Mkdir(up+".new", 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", "", err
		}
		if err := drive.Lchown(up+".new", int(rootUID+uid), int(rootUID+gid)); err != nil {
			return "", "", err
		}
		if err := drive.Chmod(up+".new", mode); err != nil {
			return "", "", err
		}
		if err := drive.Rename(up+".new", up); err != nil {
			return "", "", err
		}
	} else if err != nil {
		return "", "", err
	}
	return filepath.Join(driveDir, name, "upper"), filepath.Join(driveDir, name, "work"), nil
}

// overlayFlags are the mount flags of a sandbox's overlays on the host. They never carry
// device nodes (the sandbox's /dev is its own tmpfs). They honour set-id bits and file
// capabilities only when the sandbox has its own user namespace (idmapped: runc, crun, a
// current runsc):
// there every file of the overlay belongs to the sandbox's host uid range (its lowers are
// idmapped into it, its upper is written from inside it), so a set-id program raises no
// one above the sandbox's own root; and this mount must allow set-id, because the runtime
// copies it into the sandbox's mount namespace with its flags locked (a user namespace
// cannot clear nosuid), and sudo inside needs it. Without one (runsc 2022-12), files made inside
// belong to host root and lowers keep host root's ownership: set-id must never work here.
// Either way the mount is reachable only through the sandbox's run directory, which no
// other host account may enter.
func overlayFlags(idmapped bool) uintptr {
	if idmapped {
		return syscall.MS_NODEV
	}
	return syscall.MS_NODEV | syscall.MS_NOSUID
}

// overlayInside mounts an overlay at target inside the root filesystem rootfs. Every
// component of target must be a real directory within rootfs (missing ones are made,
// owned by uid); the mount goes onto the directory opened that way, so no symlink in the
// sandbox-writable root can redirect it.
func overlayInside(rootfs, target string, uid int, lowers []string, upper, work string, flags uintptr) error {
	cur, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer func() { cur.Close() }()
	for _, c := range strings.Split(strings.TrimPrefix(target, "/"), "/") {
		fi, err := cur.Lstat(c)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := cur.Mkdir(c, 0o755); err != nil {
				return err
			}
			if err := cur.Lchown(c, uid, uid); err != nil {
				return err
			}
		case err != nil:
			return err
		case !fi.IsDir():
			return fmt.Errorf("mount point %s in the root filesystem is not a directory: %w", target, errdefs.ErrConflict)
		}
		next, err := cur.OpenRoot(c)
		if err != nil {
			return err
		}
		cur.Close()
		cur = next
	}
	dir, err := cur.Open(".")
	if err != nil {
		return err
	}
	defer dir.Close()
	fi, err := dir.Stat()
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("mount point %s in the root filesystem: %w", target, errdefs.ErrConflict)
	}
	return linux.Overlay(fmt.Sprintf("/proc/self/fd/%d", dir.Fd()), lowers, upper, work, flags)
}
