package envd

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// fileMode is the mode of files created by uploads (before umask).
const fileMode = 0o644

// uploadedEntry is one element of the POST /files response.
type uploadedEntry struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// fileUser resolves the user of a /files request: the username query
// parameter, else the Authorization header, else the default user.
// fileTarget is the user and the resolved ?path= of a file or tar request; on a bad user
// (401) or path (400) it has answered and returns ok false.
func (s *Server) fileTarget(w http.ResponseWriter, r *http.Request) (u *users.User, path string, ok bool) {
	u, err := s.fileUser(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, err)
		return nil, "", false
	}
	path, err = resolvePath(r.URL.Query().Get("path"), u)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return nil, "", false
	}
	return u, path, true
}

func (s *Server) fileUser(r *http.Request) (*users.User, error) {
	name := r.URL.Query().Get("username")
	if name == "" {
		var err error
		if name, err = ParseBasicUser(r.Header.Get("Authorization")); err != nil {
			return nil, err
		}
	}
	return s.user(name)
}

// download serves GET /files: the file's bytes, gzip-compressed when the
// client accepts gzip. A directory, a device, a FIFO or a socket (also behind a
// symlink) is 400, a missing file 404. At most the size the file had when it was
// opened is sent, with that Content-Length when uncompressed: a file that grows
// while it is read cannot stream forever.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	u, path, ok := s.fileTarget(w, r)
	if !ok {
		return
	}
	var f *os.File
	var fi os.FileInfo
	err := linux.RunAs(credOf(u), func() error {
		var err error
		f, fi, err = openRegular(path)
		return err
	})
	if err != nil {
		writeError(w, httpStatus(err), err)
		return
	}
	defer f.Close()
	content := io.NewSectionReader(f, 0, fi.Size())
	gz, ok := chooseEncoding(r.Header.Get("Accept-Encoding"))
	if !ok {
		writeError(w, http.StatusNotAcceptable, errors.New("no acceptable content encoding: gzip and identity are supported"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(path)}))
	h.Add("Vary", "Accept-Encoding")
	if !gz {
		http.ServeContent(w, r, "", fi.ModTime(), content)
		return
	}
	h.Set("Content-Encoding", "gzip")
	zw := gzip.NewWriter(w)
	if _, err := io.Copy(zw, content); err != nil {
		s.cfg.Log.Warn("download failed", "path", path, "err", err)
		return
	}
	_ = zw.Close()
}

// openRegular opens path (symlinks resolved, inside the sandbox) for a download and
// returns it with its metadata, or an error of class InvalidArgument when it is not a
// regular file. The check is on the opened file (fstat), so a path swapped after a check
// cannot slip a device through; O_NONBLOCK keeps a FIFO from blocking the open and
// O_NOCTTY keeps a terminal from becoming moat-init's controlling terminal.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		what := "a directory"
		switch t := fi.Mode().Type(); {
		case t&os.ModeCharDevice != 0:
			what = "a character device"
		case t&os.ModeDevice != 0:
			what = "a block device"
		case t&os.ModeNamedPipe != 0:
			what = "a FIFO"
		case t&os.ModeSocket != 0:
			what = "a socket"
		case !fi.IsDir():
			what = "not a regular file"
		}
		return nil, nil, invalidArgument("path %s is %s: only regular files can be downloaded", path, what)
	}
	return f, fi, nil
}

// chooseEncoding picks gzip when the client accepts it, else identity; ok
// is false when the client refuses both.
func chooseEncoding(accept string) (gz, ok bool) {
	identity := true
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "q="); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "gzip":
			if q > 0 {
				gz = true
			}
		case "identity", "*":
			if q == 0 {
				identity = false
			}
		}
	}
	return gz, gz || identity
}

// upload serves POST /files. A multipart/form-data body carries one or
// more "file" parts, each written to the path query parameter when given,
// else to the part's filename; any other body is the content of the file
// at the path parameter. Content-Encoding: gzip bodies are decompressed.
// Missing parent directories are created; everything created belongs to
// the user. X-Metadata-<key> headers become metadata of every file.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	u, err := s.fileUser(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, err)
		return
	}
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("reading gzip body: %w", err))
			return
		}
		defer zr.Close()
		r.Body = io.NopCloser(zr)
	default:
		writeError(w, http.StatusUnsupportedMediaType, fmt.Errorf("unsupported content encoding %q", enc))
		return
	}
	md := metadataHeaders(r.Header)
	pathParam := r.URL.Query().Get("path")

	var out []uploadedEntry
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mediaType != "multipart/form-data" {
		if pathParam == "" {
			writeError(w, http.StatusBadRequest, errors.New("path is required"))
			return
		}
		e, err := s.writeFile(u, pathParam, r.Body, md)
		if err != nil {
			writeError(w, httpStatus(err), err)
			return
		}
		writeJSON(w, http.StatusOK, []uploadedEntry{e})
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("reading multipart body: %w", err))
		return
	}
	seen := map[string]bool{}
	for {
		part, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("reading multipart body: %w", err))
			return
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		target := pathParam
		if target == "" {
			// Part.FileName strips directories; the SDK sends full paths.
			target = rawFileName(part.Header)
		}
		if target == "" {
			part.Close()
			writeError(w, http.StatusBadRequest, errors.New("file part without path or filename"))
			return
		}
		resolved, err := resolvePath(target, u)
		if err != nil {
			part.Close()
			writeError(w, http.StatusBadRequest, err)
			return
		}
		if seen[resolved] {
			part.Close()
			writeError(w, http.StatusBadRequest, fmt.Errorf("more than one file for %s", resolved))
			return
		}
		seen[resolved] = true
		e, err := s.writeFile(u, target, part, md)
		part.Close()
		if err != nil {
			writeError(w, httpStatus(err), err)
			return
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		writeError(w, http.StatusBadRequest, errors.New("no file part in multipart body"))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// rawFileName is the filename parameter of a part's Content-Disposition,
// with its directories.
func rawFileName(h textproto.MIMEHeader) string {
	_, params, err := mime.ParseMediaType(h.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// metadataHeaders collects X-Metadata-<key> headers (keys lowercased).
func metadataHeaders(h http.Header) map[string]string {
	var md map[string]string
	for k, vs := range h {
		key, ok := strings.CutPrefix(k, "X-Metadata-")
		if !ok || key == "" || len(vs) == 0 {
			continue
		}
		if md == nil {
			md = make(map[string]string)
		}
		md[strings.ToLower(key)] = vs[0]
	}
	return md
}

// writeFile writes src to path (resolved for u) as u, creating parents.
func (s *Server) writeFile(u *users.User, path string, src io.Reader, md map[string]string) (uploadedEntry, error) {
	resolved, err := resolvePath(path, u)
	if err != nil {
		return uploadedEntry{}, err
	}
	// Missing parents are made for the user wherever they are, as E2B's envd does
	// (compat.go); the file is written as the user.
	if err := makeParents(filepath.Dir(resolved), credOf(u)); err != nil {
		return uploadedEntry{}, fmt.Errorf("writing %s: %w", resolved, err)
	}
	err = linux.RunAs(credOf(u), func() error {
		if fi, err := os.Stat(resolved); err == nil && fi.IsDir() {
			return invalidArgument("path %s is a directory", resolved)
		}
		f, err := os.OpenFile(resolved, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fileMode)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, src)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		// The file's metadata is the request's: an overwrite replaces what was there,
		// and one without metadata leaves none (as E2B's envd).
		if err := linux.ClearMetadata(resolved); err != nil {
			return err
		}
		if len(md) > 0 {
			return linux.WriteMetadata(resolved, md)
		}
		return nil
	})
	if err != nil {
		return uploadedEntry{}, fmt.Errorf("writing %s: %w", resolved, err)
	}
	s.cfg.Log.Debug("wrote file", "path", resolved, "user", u.Name)
	return uploadedEntry{Path: resolved, Name: filepath.Base(resolved), Type: "file", Metadata: md}, nil
}
