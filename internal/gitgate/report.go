package gitgate

import (
	"bytes"
	"fmt"
	"io"

	"github.com/moatdev/moat/internal/errdefs"
)

// Content types of git's smart HTTP for receive-pack.
const (
	ContentTypeAdvertisement = "application/x-git-receive-pack-advertisement"
	ContentTypeRequest       = "application/x-git-receive-pack-request"
	ContentTypeResult        = "application/x-git-receive-pack-result"
)

// MaxReasonLen bounds a reason in a report line; longer ones are cut.
const MaxReasonLen = 512

// RefResult is the status of one ref in a report: Err "" is "ok", anything else "ng".
type RefResult struct {
	Ref string
	Err string
}

// Report is what receive-pack answers a push with.
type Report struct {
	// UnpackErr is "" for "unpack ok", or why the pack was not taken. With a non-empty
	// UnpackErr, git push reports "remote unpack failed" and fails even with no Results.
	UnpackErr string
	// Results are the refs' statuses, normally one per command.
	Results []RefResult
	// Messages are progress lines git shows on stderr as "remote: <message>" when the
	// client asked for side-band-64k (and drops otherwise).
	Messages []string
}

// RefusalReport is the report for a refused decision: "unpack ok" (the pack was fine, the
// refs were not), "ng" with the reason prefixed with "moat: " for each command, and one
// message "moat: <ref>: <reason>" per refused command.
func RefusalReport(d Decision) Report {
	var rep Report
	for _, v := range d.Verdicts {
		res := RefResult{Ref: v.Command.Ref}
		if !v.Allow {
			res.Err = "moat: " + v.Reason
		}
		rep.Results = append(rep.Results, res)
	}
	for _, v := range d.Refused() {
		if v.Rule != RuleAllOrNothing {
			rep.Messages = append(rep.Messages, "moat: "+v.Command.Ref+": "+v.Reason)
		}
	}
	return rep
}

// CanReport reports whether a client that asked for caps reads a report: it asked for
// report-status or report-status-v2. Git always does; when a client does not, the only way
// to refuse its push is an HTTP error status.
func CanReport(caps Capabilities) bool {
	return caps.Has("report-status") || caps.Has("report-status-v2")
}

// WriteReport writes rep as the body of the answer to POST .../git-receive-pack (content
// type ContentTypeResult) in the form caps asked for: report-status lines ("unpack ...",
// then "ok <ref>" or "ng <ref> <reason>", then a flush), which report-status-v2 reads the
// same way, inside side-band-64k band 1 with the messages on band 2 when caps has
// side-band-64k (side-band, the old 1000-byte variant, likewise). Reasons and messages are
// cut to one line of printable ASCII. A client that cannot read a report (CanReport) is an
// errdefs.ErrInvalidArgument error and nothing is written.
func WriteReport(w io.Writer, caps Capabilities, rep Report) error {
	if !CanReport(caps) {
		return fmt.Errorf("writing a push report: the client did not ask for report-status: %w", errdefs.ErrInvalidArgument)
	}
	var status bytes.Buffer
	pw := NewPktWriter(&status)
	unpack := "unpack ok\n"
	if rep.UnpackErr != "" {
		unpack = "unpack " + sanitizeLine(rep.UnpackErr) + "\n"
	}
	if err := pw.WriteString(unpack); err != nil {
		return err
	}
	for _, r := range rep.Results {
		line := "ok " + sanitizeLine(r.Ref) + "\n"
		if r.Err != "" {
			line = "ng " + sanitizeLine(r.Ref) + " " + sanitizeLine(r.Err) + "\n"
		}
		if err := pw.WriteString(line); err != nil {
			return err
		}
	}
	if err := pw.Flush(); err != nil {
		return err
	}

	band := 0
	switch {
	case caps.Has("side-band-64k"):
		band = MaxPktData - 1
	case caps.Has("side-band"):
		band = 1000 - 4 - 1
	}
	if band == 0 {
		_, err := w.Write(status.Bytes())
		return err
	}
	var out bytes.Buffer
	ow := NewPktWriter(&out)
	for _, m := range rep.Messages {
		if err := ow.Write(append([]byte{2}, cut(sanitizeLine(m), band-1)+"\n"...)); err != nil {
			return err
		}
	}
	for b := status.Bytes(); len(b) > 0; {
		n := min(len(b), band)
		if err := ow.Write(append([]byte{1}, b[:n]...)); err != nil {
			return err
		}
		b = b[n:]
	}
	if err := ow.Flush(); err != nil {
		return err
	}
	_, err := w.Write(out.Bytes())
	return err
}

// sanitizeLine makes s one line of printable ASCII, at most MaxReasonLen bytes: other
// bytes become "?".
func sanitizeLine(s string) string {
	s = cut(s, MaxReasonLen)
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c >= 0x7f {
			b[i] = '?'
		}
	}
	return string(b)
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
