package gitgate

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func gz(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}

func TestDecodeBody(t *testing.T) {
	req := body([]string{z1 + " " + a1 + " refs/heads/agent/t/x\x00report-status", ""}, "PACKdata")
	bomb := gz(make([]byte, 10<<20)) // 10 MiB of zeros, about 10 KiB compressed
	for _, tc := range []struct {
		name, enc string
		in        []byte
		max       int64
		want      []byte
		err       error
	}{
		{"identity", "", req, 1 << 20, req, nil},
		{"identity named", "identity", req, 1 << 20, req, nil},
		{"gzip", "gzip", gz(req), 1 << 20, req, nil},
		{"x-gzip", "X-Gzip", gz(req), 1 << 20, req, nil},
		{"exactly max", "", req, int64(len(req)), req, nil},
		{"one over", "", req, int64(len(req) - 1), nil, errdefs.ErrInvalidArgument},
		{"gzip bomb", "gzip", bomb, 1 << 20, nil, errdefs.ErrInvalidArgument},
		{"bad gzip", "gzip", []byte("not gzip"), 1 << 20, nil, errdefs.ErrInvalidArgument},
		{"truncated gzip", "gzip", gz(req)[:20], 1 << 20, nil, io.ErrUnexpectedEOF},
		{"deflate", "deflate", req, 1 << 20, nil, errdefs.ErrInvalidArgument},
		{"br", "br", req, 1 << 20, nil, errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DecodeBody(bytes.NewReader(tc.in), tc.enc, tc.max)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(r)
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				if int64(len(got)) > tc.max {
					t.Fatalf("read %d bytes past the limit", len(got))
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got %d bytes, %v", len(got), err)
			}
			if p, err := ParseReceivePack(bytes.NewReader(got), Limits{}); err != nil || p.Commands[0].Ref != "refs/heads/agent/t/x" {
				t.Fatalf("parse: %v", err)
			}
		})
	}
	if _, err := DecodeBody(strings.NewReader(""), "gzip, gzip", 10); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("stacked encodings: %v", err)
	}
}
