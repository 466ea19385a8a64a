package envd

import (
	"os"
	"path/filepath"
	"syscall"

	"google.golang.org/protobuf/types/known/timestamppb"

	fspb "github.com/moatdev/moat/api/envd/filesystem"
	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
)

// entryInfo describes the entry at path, whose Lstat result is fi. Owner
// and group are names from the sandbox's user database (numbers when they
// have none); metadata comes from user.e2b.* extended attributes.
func (s *Server) entryInfo(path string, fi os.FileInfo) *fspb.EntryInfo {
	e := &fspb.EntryInfo{
		Name:         filepath.Base(path),
		Type:         fspb.FileType_FILE_TYPE_FILE,
		Path:         path,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	switch {
	case fi.IsDir():
		e.Type = fspb.FileType_FILE_TYPE_DIRECTORY
	case fi.Mode()&os.ModeSymlink != 0:
		e.Type = fspb.FileType_FILE_TYPE_SYMLINK
		if target, ok := symlinkTarget(path); ok {
			e.SymlinkTarget = &target
		}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = s.cfg.Users.UserName(st.Uid)
		e.Group = s.cfg.Users.GroupName(st.Gid)
	}
	if md, err := linux.ReadMetadata(path); err == nil && len(md) > 0 {
		e.Metadata = md
	}
	return e
}

// statEntry is entryInfo for path, which must exist.
func (s *Server) statEntry(path string) (*fspb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return s.entryInfo(path, fi), nil
}
