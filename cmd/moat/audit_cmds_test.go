package main

import (
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/daemon"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"2026-12-01T06:00:00Z": time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC),
		"90m":                  now.Add(-90 * time.Minute),
		"2d":                   now.Add(-48 * time.Hour),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-1h", "0", "2026-13-01"} {
		if _, err := parseSince(bad, now); err == nil || !strings.Contains(err.Error(), "--since") {
			t.Errorf("parseSince(%q) accepted: %v", bad, err)
		}
	}
}

func TestAuditServeFlags(t *testing.T) {
	var cfg daemon.Config
	if err := (&auditServeFlags{keep: "90d", max: "1000"}).apply(&cfg); err != nil || cfg.AuditKeep != 90*24*time.Hour || cfg.AuditMax != 1000 {
		t.Fatalf("apply: %v %+v", err, cfg)
	}
	for _, f := range []auditServeFlags{{keep: "0"}, {keep: "soon"}, {max: "0"}, {max: "-5"}, {max: "lots"}} {
		if err := f.apply(&daemon.Config{}); err == nil {
			t.Errorf("%+v accepted", f)
		}
	}
}
