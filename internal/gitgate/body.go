package gitgate

import (
	"compress/gzip"
	"fmt"
	"io"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// DecodeBody returns a reader of a request body's bytes as ParseReceivePack reads them:
// body undone of its Content-Encoding (none, "identity", "gzip" or "x-gzip"; git gzips
// some request bodies), cut off with an errdefs.ErrInvalidArgument error after max bytes
// (decoded), so a small compressed body cannot expand without bound. Another encoding is
// errdefs.ErrInvalidArgument. Chunked transfer coding is net/http's business, not this.
func DecodeBody(body io.Reader, contentEncoding string, max int64) (io.Reader, error) {
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(contentEncoding)) {
	case "", "identity":
		r = body
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, fmt.Errorf("gzip request body: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		zr.Multistream(false)
		r = zr
	default:
		return nil, fmt.Errorf("request body Content-Encoding %q: want gzip or none: %w", truncate(contentEncoding, 40), errdefs.ErrInvalidArgument)
	}
	return &limitReader{r: r, left: max, max: max}, nil
}

// limitReader is io.LimitReader that says so when the limit is hit.
type limitReader struct {
	r         io.Reader
	left, max int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more tells a body of exactly max bytes from a longer one.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("request body longer than %d bytes: %w", l.max, errdefs.ErrInvalidArgument)
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
