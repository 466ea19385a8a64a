package gitgate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// Bounds of ParseReport: what a remote answers a push with is small.
const (
	maxReportStatus   = 1 << 20 // report-status bytes (band 1)
	maxReportMessages = 100     // progress lines kept (band 2)
	maxReportRefs     = 4096    // ok/ng lines
)

// ParseReport reads a receive-pack answer (the body of the answer to POST
// …/git-receive-pack, ContentTypeResult), as WriteReport writes it: report-status
// pkt-lines ("unpack …", "ok REF" or "ng REF REASON", report-status-v2's "option …" lines,
// a flush), inside side-band pkt-lines when sideband (band 1 the status, band 2 progress
// kept in Messages, band 3 a fatal error, which is an error). Everything it reads is
// bounded (1 MiB of status, 100 messages, each line cut to MaxReasonLen printable ASCII).
// It is pure; malformed input is errdefs.ErrInvalidArgument, a truncated one
// io.ErrUnexpectedEOF.
func ParseReport(r io.Reader, sideband bool) (Report, error) {
	var rep Report
	status := r
	if sideband {
		var buf bytes.Buffer
		pr := NewPktReader(r)
	demux:
		for {
			kind, data, err := pr.Read()
			switch {
			case errors.Is(err, io.EOF):
				return Report{}, fmt.Errorf("push report: side-band ended without a flush: %w", io.ErrUnexpectedEOF)
			case err != nil:
				return Report{}, fmt.Errorf("push report: %w", err)
			case kind == PktFlush:
				break demux
			case kind != PktData || len(data) == 0:
				return Report{}, fmt.Errorf("push report: a %s line in the side-band: %w", kind, errdefs.ErrInvalidArgument)
			}
			switch data[0] {
			case 1:
				if buf.Len()+len(data)-1 > maxReportStatus {
					return Report{}, fmt.Errorf("push report: more than %d bytes of status: %w", maxReportStatus, errdefs.ErrInvalidArgument)
				}
				buf.Write(data[1:])
			case 2:
				for l := range strings.SplitSeq(strings.TrimRight(string(data[1:]), "\r\n"), "\n") {
					if l = strings.TrimRight(l, "\r"); l != "" && len(rep.Messages) < maxReportMessages {
						rep.Messages = append(rep.Messages, sanitizeLine(l))
					}
				}
			case 3:
				return Report{}, fmt.Errorf("push report: the remote failed: %s: %w", sanitizeLine(strings.TrimRight(string(data[1:]), "\n")), errdefs.ErrInvalidArgument)
			default:
				return Report{}, fmt.Errorf("push report: side-band %d: %w", data[0], errdefs.ErrInvalidArgument)
			}
		}
		status = &buf
	}
	pr := NewPktReader(io.LimitReader(status, maxReportStatus))
	first := true
	for {
		kind, data, err := pr.Read()
		switch {
		case errors.Is(err, io.EOF):
			return Report{}, fmt.Errorf("push report: ended without a flush: %w", io.ErrUnexpectedEOF)
		case err != nil:
			return Report{}, fmt.Errorf("push report: %w", err)
		case kind == PktFlush:
			if first {
				return Report{}, fmt.Errorf("push report: no unpack line: %w", errdefs.ErrInvalidArgument)
			}
			return rep, nil
		case kind != PktData:
			return Report{}, fmt.Errorf("push report: a %s line: %w", kind, errdefs.ErrInvalidArgument)
		}
		line := strings.TrimSuffix(string(data), "\n")
		if first {
			first = false
			u, ok := strings.CutPrefix(line, "unpack ")
			if !ok {
				return Report{}, fmt.Errorf("push report: %q is not an unpack line: %w", sanitizeLine(line), errdefs.ErrInvalidArgument)
			}
			if u != "ok" {
				rep.UnpackErr = sanitizeLine(u)
				if rep.UnpackErr == "" {
					rep.UnpackErr = "?"
				}
			}
			continue
		}
		switch {
		case strings.HasPrefix(line, "ok "):
			ref := line[3:]
			if ref == "" {
				return Report{}, fmt.Errorf("push report: an ok line without a ref: %w", errdefs.ErrInvalidArgument)
			}
			rep.Results = append(rep.Results, RefResult{Ref: sanitizeLine(ref)})
		case strings.HasPrefix(line, "ng "):
			ref, why, _ := strings.Cut(line[3:], " ")
			if ref == "" {
				return Report{}, fmt.Errorf("push report: an ng line without a ref: %w", errdefs.ErrInvalidArgument)
			}
			why = sanitizeLine(why)
			if why == "" {
				why = "failed" // "ng REF" alone is still a failure
			}
			rep.Results = append(rep.Results, RefResult{Ref: sanitizeLine(ref), Err: why})
		case strings.HasPrefix(line, "option "):
			// report-status-v2: refname/old-oid/new-oid/forced-update of the last ref.
		default:
			return Report{}, fmt.Errorf("push report: %q: %w", sanitizeLine(line), errdefs.ErrInvalidArgument)
		}
		if len(rep.Results) > maxReportRefs {
			return Report{}, fmt.Errorf("push report: more than %d refs: %w", maxReportRefs, errdefs.ErrInvalidArgument)
		}
	}
}

// Failed reports whether rep says the push did not fully land: the pack was not taken,
// or a ref was refused.
func (rep Report) Failed() bool {
	if rep.UnpackErr != "" {
		return true
	}
	for _, r := range rep.Results {
		if r.Err != "" {
			return true
		}
	}
	return false
}
