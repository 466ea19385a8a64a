// Command hostileinit stands in for a compromised moat-init: it answers the daemon's
// health checks and serves GET /files with answers meant to make `moat cp` write without
// bound on the host, and GET /moat/tar with tar streams meant to make it write outside its
// destination (a ".." entry, an absolute one, a symlink and then a file through it) or to
// leave a half-made copy, chosen by the requested path.
package main

import (
	"archive/tar"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; os.Exit(0) }()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Query().Get("path") {
		case "/chunked": // no length, endless
		case "/huge": // a terabyte announced, endless
			h.Set("Content-Length", "1099511627776")
		case "/gzip": // compressed though identity was asked for, no length
			h.Set("Content-Encoding", "gzip")
		case "/ok":
			h.Set("Content-Length", "6")
			io.WriteString(w, "hello\n")
			return
		default:
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
		io.Copy(w, zeros{})
	})
	mux.HandleFunc("GET /moat/tar", hostileTar)
	if err := http.ListenAndServe(":49983", mux); err != nil {
		os.Exit(1)
	}
}

// hostileTar serves GET /moat/tar. The path /KIND/OUTSIDE picks the attack; OUTSIDE is
// the host directory the test watches (the streams name it, absolutely or through a
// symlink).
func hostileTar(w http.ResponseWriter, r *http.Request) {
	kind, outside, _ := strings.Cut(strings.TrimPrefix(r.URL.Query().Get("path"), "/"), "/")
	outside = "/" + outside
	type ent struct {
		name, link string
		typ        byte
		size       int64
	}
	var ents []ent
	trailer := "ok"
	switch "/" + kind {
	case "/dotdot":
		ents = []ent{{name: "t/", typ: tar.TypeDir}, {name: "t/ok", typ: tar.TypeReg, size: 3}, {name: "t/../../escaped", typ: tar.TypeReg, size: 3}}
	case "/absolute":
		ents = []ent{{name: "t/", typ: tar.TypeDir}, {name: outside + "/escaped", typ: tar.TypeReg, size: 3}}
	case "/symlink-write":
		ents = []ent{{name: "t/", typ: tar.TypeDir}, {name: "t/l", typ: tar.TypeSymlink, link: outside}, {name: "t/l/escaped", typ: tar.TypeReg, size: 3}}
	case "/symlink-replace":
		ents = []ent{{name: "t/", typ: tar.TypeDir}, {name: "t/l", typ: tar.TypeSymlink, link: outside + "/victim"}, {name: "t/l", typ: tar.TypeReg, size: 3}}
	case "/hardlink":
		ents = []ent{{name: "t/", typ: tar.TypeDir}, {name: "t/h", typ: tar.TypeLink, link: outside + "/victim"}}
	case "/huge": // a terabyte announced
		ents = []ent{{name: "t/", typ: tar.TypeDir}, {name: "t/big", typ: tar.TypeReg, size: 1 << 40}}
	case "/no-trailer": // well-formed, but never said to be complete
		ents = []ent{{name: "t/", typ: tar.TypeDir}, {name: "t/ok", typ: tar.TypeReg, size: 3}}
		trailer = ""
	case "/cut-short": // said to have failed
		ents = []ent{{name: "t/", typ: tar.TypeDir}, {name: "t/ok", typ: tar.TypeReg, size: 3}}
		trailer = "error: disk on fire"
	case "/honest":
		ents = []ent{{name: "t/", typ: tar.TypeDir}, {name: "t/ok", typ: tar.TypeReg, size: 3}}
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Trailer", "X-Moat-Tar-Status")
	w.WriteHeader(http.StatusOK)
	tw := tar.NewWriter(w)
	for _, e := range ents {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Size: e.size, Mode: 0o644}); err != nil {
			return
		}
		if e.typ == tar.TypeReg {
			if _, err := io.CopyN(tw, zeros{}, e.size); err != nil {
				return
			}
		}
	}
	tw.Close()
	if trailer != "" {
		w.Header().Set("X-Moat-Tar-Status", trailer)
	}
}
