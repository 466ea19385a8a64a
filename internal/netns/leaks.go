package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/linux"
)

// Leaks lists what the network of sandboxes leaves behind that should not be there, one
// human-readable line each, for tests and `moat doctor`:
//
//   - gateway namespace files (mounted or not) of sandboxes not in known;
//   - links in the calling thread's (the host's) network namespace whose peer is in a
//     sandbox's gateway or sandbox namespace: moat never makes one, and one would be a path
//     out of the sandbox.
//
// It changes nothing. A missing run directory is not an error.
func (m *Manager) Leaks(known []string) ([]string, error) {
	isKnown := make(map[string]bool, len(known))
	for _, id := range known {
		isKnown[id] = true
	}
	dir := filepath.Join(m.runDir, "sandboxes")
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var leaks []string
	// Namespace ids as seen from here of every pinned G and S, to recognise their peers.
	owner := map[int]string{}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		id := e.Name()
		gw := m.gwPath(id)
		if _, err := os.Lstat(gw); err == nil && !isKnown[id] {
			state := "pinned"
			if !linux.IsMountPoint(gw) {
				state = "not mounted"
			}
			leaks = append(leaks, fmt.Sprintf("gateway namespace %s of unknown sandbox %s (%s)", gw, id, state))
		}
		for _, p := range []string{gw, filepath.Join(dir, id, "netns")} {
			f, err := linux.OpenNetNS(p)
			if err != nil {
				continue
			}
			nsid, err := h.GetNetNsIdByFd(int(f.Fd()))
			f.Close()
			if err == nil && nsid >= 0 {
				owner[nsid] = p
			}
		}
	}
	if len(owner) > 0 {
		links, err := h.LinkList()
		if err != nil {
			return nil, fmt.Errorf("listing host links: %w", err)
		}
		for _, l := range links {
			a := l.Attrs()
			if p, ok := owner[a.NetNsID]; ok && a.NetNsID >= 0 && a.ParentIndex > 0 {
				leaks = append(leaks, fmt.Sprintf("%s %s in the host namespace is joined to %s", l.Type(), a.Name, p))
			}
		}
	}
	return leaks, nil
}
