package envd

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/tarcopy"
)

// tarDownload serves GET /moat/tar?path=P: a tar stream of the file or directory P (a
// symlink at P followed, none below it), made as the request's user inside the sandbox,
// as one tree named after P's last component (internal/tarcopy). Devices, FIFOs and
// sockets below P are left out and counted in the X-Moat-Tar-Skipped trailer; P itself
// being one is 400, a missing P 404. The X-Moat-Tar-Status trailer is "ok" when the
// stream is complete, else the error that cut it short.
func (s *Server) tarDownload(w http.ResponseWriter, r *http.Request) {
	u, path, ok := s.fileTarget(w, r)
	if !ok {
		return
	}
	name := filepath.Base(path)
	if path == "/" {
		name = "root"
	}
	var skipped int
	err := linux.RunAs(credOf(u), func() error {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return invalidArgument("path %s is %s: only regular files and directories can be copied", path, tarcopy.Describe(fi.Mode()))
		}
		h := w.Header()
		h.Set("Content-Type", "application/x-tar")
		h.Set("Trailer", v1.TarStatusTrailer+", "+v1.TarSkippedTrailer)
		w.WriteHeader(http.StatusOK)
		tw := tar.NewWriter(w)
		werr := tarcopy.WriteTree(r.Context(), tw, path, name, func(rel, what string) { skipped++ })
		if werr == nil {
			werr = tw.Close()
		}
		h.Set(v1.TarSkippedTrailer, strconv.Itoa(skipped))
		if werr != nil {
			s.cfg.Log.Warn("tar download cut short", "path", path, "err", werr)
			h.Set(v1.TarStatusTrailer, oneLine(werr.Error()))
			return nil
		}
		h.Set(v1.TarStatusTrailer, "ok")
		return nil
	})
	if err != nil {
		writeError(w, tarStatus(err), err)
	}
}

// tarUpload serves POST /moat/tar?path=P: the body is a tar stream (internal/tarcopy),
// extracted as the request's user. With into=1 its entries go into the directory P as
// named (P and its parents are made). Otherwise, as cp does, a P that is a directory
// receives the stream's tree under its own name, and any other P becomes the tree (the
// tree's top renamed to P's last component, P's parents made). Entries that would leave
// the destination, or pass through a symlink the stream made, are refused (400) and end
// the extraction; what was made before stays. The response is {"entries","bytes"}.
func (s *Server) tarUpload(w http.ResponseWriter, r *http.Request) {
	u, path, ok := s.fileTarget(w, r)
	if !ok {
		return
	}
	into := r.URL.Query().Get("into") == "1"
	var st tarcopy.Stats
	err := linux.RunAs(credOf(u), func() error {
		dir, top := path, ""
		if !into {
			if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
				dir, top = filepath.Dir(path), filepath.Base(path)
				if path == "/" {
					return invalidArgument("path / is not a directory to copy into")
				}
			}
		}
		if err := os.MkdirAll(dir, dirMode); err != nil {
			return err
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			return err
		}
		defer root.Close()
		st, err = tarcopy.Extract(r.Context(), root, r.Body, tarcopy.ExtractOptions{Top: top})
		if err != nil {
			return fmt.Errorf("extracting into %s: %w", dir, err)
		}
		return nil
	})
	if err != nil {
		writeError(w, tarStatus(err), err)
		return
	}
	s.cfg.Log.Debug("extracted tar", "path", path, "entries", st.Entries, "bytes", st.Bytes, "user", u.Name)
	writeJSON(w, http.StatusOK, st)
}

// tarStatus is the REST status of a tar route's error: tarcopy's classes first, then
// the file API's.
func tarStatus(err error) int {
	switch {
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	}
	return httpStatus(err)
}

// oneLine makes s fit a header value: one line, at most 512 bytes.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 512 {
		s = s[:512]
	}
	return "error: " + s
}
