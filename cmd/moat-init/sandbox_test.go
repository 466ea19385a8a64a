package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
)

func TestCheckPlacement(t *testing.T) {
	ok := linux.Placement{PID: 1, Exe: initPath, ExeRDOnly: true}
	for name, tc := range map[string]struct {
		p    linux.Placement
		want string // "" = allowed; else a part of the reason
	}{
		"PID 1 of a sandbox":         {ok, ""},
		"a host process":             {linux.Placement{PID: 4242, Exe: "/tmp/x/moat-init", ExeRDOnly: false}, "pid 4242"},
		"PID 1 on the host's root":   {linux.Placement{PID: 1, Exe: "/usr/local/bin/moat-init"}, "runs from /usr/local/bin/moat-init"},
		"copied to /.moat writable":  {linux.Placement{PID: 1, Exe: initPath}, "not on a read-only mount"},
		"not PID 1 in a sandbox":     {linux.Placement{PID: 7, Exe: initPath, ExeRDOnly: true}, "not PID 1"},
		"exe unreadable":             {linux.Placement{PID: 1, ExeStatErr: errors.New("no /proc")}, "no /proc"},
		"a similar path":             {linux.Placement{PID: 1, Exe: initPath + "2", ExeRDOnly: true}, "runs from"},
		"a path resolving elsewhere": {linux.Placement{PID: 1, Exe: "/.moat/../.moat/moat-init", ExeRDOnly: true}, "runs from"},
	} {
		t.Run(name, func(t *testing.T) {
			err := checkPlacement(tc.p)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, errNotInSandbox) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}

func TestReadToken(t *testing.T) {
	for in, want := range map[string]string{
		"abc":                                 "abc",
		"abc\n":                               "abc",
		"  abc \r\n":                          "abc",
		strings.Repeat("t", maxTokenBytes):    strings.Repeat("t", maxTokenBytes),
		"":                                    "error",
		"\n \t":                               "error",
		strings.Repeat("t", maxTokenBytes+1):  "error",
		strings.Repeat("t", maxTokenBytes*10): "error",
	} {
		tok, err := readToken(strings.NewReader(in))
		switch {
		case want == "error" && err == nil:
			t.Errorf("readToken(%.20q…) accepted", in)
		case want != "error" && (err != nil || !tok.Equal(want)):
			t.Errorf("readToken(%.20q…) = %v", in, err)
		}
	}
}

func TestLimitHandler(t *testing.T) {
	var out strings.Builder
	h := newLimitHandler(slog.NewTextHandler(&out, nil), 1, 5)
	now := time.Unix(1000, 0)
	h.s.now = func() time.Time { return now }
	log := slog.New(h).With("conn", "x") // derived loggers share the bucket
	for range 1000 {
		log.Warn("bad request")
	}
	if got := strings.Count(out.String(), "bad request"); got != 5 {
		t.Fatalf("%d lines of 1000 passed at once, want the burst of 5", got)
	}
	now = now.Add(time.Second)
	log.Info("later")
	s := out.String()
	if !strings.Contains(s, "dropped=995") || !strings.Contains(s, "later") {
		t.Fatalf("no count of the dropped lines before the next one:\n%s", s)
	}
}
