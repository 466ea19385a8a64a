package envd

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	fspb "github.com/moatdev/moat/api/envd/filesystem"
	"github.com/moatdev/moat/api/envd/filesystem/filesystemconnect"
	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// filesystemService implements filesystem.Filesystem. Every file access
// runs with the filesystem credentials of the request's user, so the
// kernel checks permissions and new entries belong to that user.
type filesystemService struct{ s *Server }

var _ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)

// dirMode is the mode of directories created for a user (before umask).
const dirMode = 0o755

// target resolves the request's user and path.
func (fss *filesystemService) target(h http.Header, path string) (*users.User, string, error) {
	u, err := fss.s.rpcUser(h)
	if err != nil {
		return nil, "", err
	}
	p, err := resolvePath(path, u)
	if err != nil {
		return nil, "", err
	}
	return u, p, nil
}

// Stat describes one entry; a symlink is described, not followed.
func (fss *filesystemService) Stat(_ context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	u, path, err := fss.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var e *fspb.EntryInfo
	err = linux.RunAs(credOf(u), func() (err error) {
		e, err = fss.s.statEntry(path)
		return err
	})
	if err != nil {
		return nil, rpcError(fmt.Errorf("stat %s: %w", path, err))
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: e}), nil
}

// ListDir lists a directory (following it if it is a symlink) down to the
// requested depth (default 1), without following symlinks below it.
// Subdirectories the user cannot read are listed without their contents.
func (fss *filesystemService) ListDir(_ context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	u, root, err := fss.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	var entries []*fspb.EntryInfo
	err = linux.RunAs(credOf(u), func() error {
		fi, err := os.Stat(root)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return invalidArgument("path %s is not a directory", root)
		}
		var walk func(dir string, level int) error
		walk = func(dir string, level int) error {
			des, err := os.ReadDir(dir)
			if err != nil {
				return err
			}
			for _, de := range des {
				p := filepath.Join(dir, de.Name())
				fi, err := os.Lstat(p)
				if err != nil {
					continue // removed meanwhile
				}
				entries = append(entries, fss.s.entryInfo(p, fi))
				if fi.IsDir() && level < depth {
					_ = walk(p, level+1)
				}
			}
			return nil
		}
		return walk(root, 1)
	})
	if err != nil {
		return nil, rpcError(fmt.Errorf("listing %s: %w", root, err))
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}

// MakeDir creates a directory and its missing parents, owned by the user.
// An existing directory is AlreadyExists.
func (fss *filesystemService) MakeDir(_ context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	u, path, err := fss.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var e *fspb.EntryInfo
	err = linux.RunAs(credOf(u), func() error {
		if fi, err := os.Stat(path); err == nil {
			if fi.IsDir() {
				return connect.NewError(connect.CodeAlreadyExists, errorf("directory %s already exists", path))
			}
			return invalidArgument("path %s exists and is not a directory", path)
		}
		if err := os.MkdirAll(path, dirMode); err != nil {
			return err
		}
		e, err = fss.s.statEntry(path)
		return err
	})
	if err != nil {
		return nil, rpcError(fmt.Errorf("making directory %s: %w", path, err))
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: e}), nil
}

// Move renames source to destination, creating destination's missing
// parents.
func (fss *filesystemService) Move(_ context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	u, src, err := fss.target(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := resolvePath(req.Msg.GetDestination(), u)
	if err != nil {
		return nil, err
	}
	var e *fspb.EntryInfo
	err = linux.RunAs(credOf(u), func() error {
		if _, err := os.Lstat(src); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), dirMode); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		e, err = fss.s.statEntry(dst)
		return err
	})
	if err != nil {
		return nil, rpcError(fmt.Errorf("moving %s to %s: %w", src, dst, err))
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: e}), nil
}

// Remove deletes a file or a directory tree. A missing path is not an
// error, as with envd.
func (fss *filesystemService) Remove(_ context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	u, path, err := fss.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if path == "/" {
		return nil, invalidArgument("refusing to remove /")
	}
	err = linux.RunAs(credOf(u), func() error { return os.RemoveAll(path) })
	if err != nil {
		return nil, rpcError(fmt.Errorf("removing %s: %w", path, err))
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}
