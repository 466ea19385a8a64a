package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "github.com/moatdev/moat/api/v1"
)

// TarStream is a tar stream of a file tree coming out of a sandbox (ReadTar). Read it to
// its end, then call Err: the stream is whole only when Err returns nil.
type TarStream struct {
	resp *http.Response
	eof  bool
}

// Read reads the stream.
func (t *TarStream) Read(p []byte) (int, error) {
	n, err := t.resp.Body.Read(p)
	if errors.Is(err, io.EOF) {
		t.eof = true
	}
	return n, err
}

// Err reports whether the whole stream arrived: nil only when it was read to its end and
// the sandbox's trailer says it is complete. It reads (and discards) what is left, up to
// 1 MiB, to reach the trailer.
func (t *TarStream) Err() error {
	if !t.eof {
		n, err := io.Copy(io.Discard, io.LimitReader(t.resp.Body, 1<<20+1))
		if err != nil {
			return fmt.Errorf("reading the tar stream: %w", err)
		}
		if n > 1<<20 {
			return errors.New("the tar stream goes on after its end")
		}
		t.eof = true
	}
	switch st := t.resp.Trailer.Get(v1.TarStatusTrailer); st {
	case "ok":
		return nil
	case "":
		return errors.New("the tar stream ended without saying it was complete")
	default:
		return fmt.Errorf("the sandbox cut the tar stream short: %.512s", strings.TrimPrefix(st, "error: "))
	}
}

// Skipped is how many devices, FIFOs and sockets the sandbox left out (known after Err).
func (t *TarStream) Skipped() int {
	n, _ := strconv.Atoi(t.resp.Trailer.Get(v1.TarSkippedTrailer))
	return n
}

// Close ends the download.
func (t *TarStream) Close() error { return t.resp.Body.Close() }

// ReadTar opens a tar stream of the file or directory path in sandbox id (as user; "":
// the sandbox's user), made inside the sandbox by its moat-init: one tree named after
// path's last component, modes kept, symlinks as links. The sandbox is not trusted:
// extract the stream with internal/tarcopy (or an equally careful extractor) and check
// Err at its end.
func (c *Client) ReadTar(ctx context.Context, id, path, user string) (*TarStream, error) {
	resp, err := c.getIdentity(ctx, id, "moat/tar", path, user)
	if err != nil {
		return nil, err
	}
	return &TarStream{resp: resp}, nil
}

// WriteTar extracts the tar stream r in sandbox id (as user) at path: with into, its
// entries go into the directory path as named; otherwise as cp does, into path when it
// is a directory, else as path (the stream's one tree renamed). The sandbox's moat-init
// refuses entries that would leave the destination.
func (c *Client) WriteTar(ctx context.Context, id, path, user string, into bool, r io.Reader) (*v1.TarResult, error) {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	if into {
		q.Set("into", "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/sandboxes/"+url.PathEscape(id)+"/envd/moat/tar?"+q.Encode(), r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.sendRequest(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out v1.TarResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&out); err != nil {
		return nil, fmt.Errorf("writing %s: reading the answer: %w", path, err)
	}
	return &out, nil
}
