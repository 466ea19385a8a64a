package inventory

import (
	"context"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/sandbox"
)

// maxSetID bounds the set-id programs ScanSetID lists.
const maxSetID = 200

// ScanSetID lists the set-user-ID and set-group-ID regular files of a template, as paths
// inside the sandbox, sorted: the union of its parts' layers (a path in an upper layer
// hides the same path below, whatever its mode; overlay whiteouts are character devices
// and hide it too). Inside a sandbox such a program runs as its owner — root of the
// sandbox's user namespace for sudo, su, mount — so any user may become root there if the
// program lets them. It reads only; ctx stops a long walk.
func ScanSetID(ctx context.Context, t sandbox.Template) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, part := range t.Parts {
		for _, layer := range part.Layers { // first = topmost
			err := filepath.WalkDir(layer, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil // unreadable: skip
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				rel, _ := filepath.Rel(layer, p)
				inside := path.Join(part.Target, filepath.ToSlash(rel))
				if d.IsDir() {
					return nil
				}
				if seen[inside] {
					return nil
				}
				seen[inside] = true
				if !d.Type().IsRegular() {
					return nil
				}
				info, err := d.Info()
				if err != nil {
					return nil
				}
				if info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 && len(out) < maxSetID {
					out = append(out, inside)
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// TemplateFlags are the flags of a scanned template: set-id programs that give root in
// the sandbox (sudo, su) and a default user of root. Pure.
func TemplateFlags(t v1.InventoryTemplate) []v1.InventoryFlag {
	var out []v1.InventoryFlag
	var rootGivers []string
	for _, p := range t.SetID {
		switch path.Base(p) {
		case "sudo", "su", "doas", "pkexec":
			rootGivers = append(rootGivers, p)
		}
	}
	if len(rootGivers) > 0 {
		out = append(out, v1.InventoryFlag{Kind: "template-setid-root", Severity: Low,
			Detail: "set-uid programs that make a user root of the sandbox (" + strings.Join(rootGivers, ", ") + "): users added without sudo can still become root if they know a password or are in sudoers"})
	}
	if t.Scanned && (t.DefaultUser == "" || t.DefaultUser == "root" || t.DefaultUser == "0") {
		out = append(out, v1.InventoryFlag{Kind: "template-root-user", Severity: Low,
			Detail: "commands run as root of the sandbox by default (the template sets no other user)"})
	}
	return out
}
