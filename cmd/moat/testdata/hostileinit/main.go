// Command hostileinit stands in for a compromised moat-init: it answers the daemon's
// health checks and serves GET /files with answers meant to make `moat cp` write without
// bound on the host, chosen by the requested path.
package main

import (
	"io"
	"net/http"
	"os"
	"os/signal"
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
	if err := http.ListenAndServe(":49983", mux); err != nil {
		os.Exit(1)
	}
}
