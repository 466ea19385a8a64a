package main

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
)

func TestPreviewServeFlags(t *testing.T) {
	var cfg daemon.Config
	if err := (&previewServeFlags{domain: "Preview.Example.com.", allowPublic: true}).apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Previews != (daemon.PreviewsConfig{Domain: "preview.example.com", AllowPublic: true}) {
		t.Errorf("config %+v", cfg.Previews)
	}
	for _, bad := range []string{"http://x", "*.x", ".x", "a b", "u@x"} {
		if err := (&previewServeFlags{domain: bad}).apply(&cfg); err == nil {
			t.Errorf("--preview-domain %q accepted", bad)
		}
	}
}

// TestCLIPorts: moat port open prints the token and path URL, port ls shows it, close
// makes the port private (its token gone), and public is refused without the operator's
// flag.
func TestCLIPorts(t *testing.T) {
	c := newCLI(t)
	out, e, code := c.run("", "create", "--memory", "256M", "--disk", "128M", "--json")
	if code != 0 {
		t.Fatalf("create: %d %s", code, e)
	}
	var sb v1.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil {
		t.Fatal(err)
	}
	out, e, code = c.run("", "port", "open", sb.ID, "8080")
	if code != 0 || !strings.Contains(out, "port 8080: token") || !strings.Contains(out, "/preview/"+sb.ID+"/8080/") || !strings.Contains(out, "token: mpt_") {
		t.Fatalf("port open: %d %q %s", code, out, e)
	}
	tok := strings.Fields(out[strings.Index(out, "token: mpt_"):])[1]
	out, _, code = c.run("", "port", "ls", sb.ID, "--json")
	var ports []v1.Port
	if code != 0 || json.Unmarshal([]byte(out), &ports) != nil || len(ports) != 1 || ports[0].Token != tok || ports[0].Visibility != "token" {
		t.Fatalf("port ls: %d %q", code, out)
	}
	if out, _, code = c.run("", "port", "ls", sb.ID); code != 0 || !strings.Contains(out, "8080") || !strings.Contains(out, "VISIBILITY") {
		t.Errorf("port ls: %d %q", code, out)
	}
	if _, e, code = c.run("", "port", "open", sb.ID, "8080", "--visibility", "public"); code == 0 || !strings.Contains(e, "--allow-public-ports") {
		t.Errorf("public without the flag: %d %q", code, e)
	}
	if out, _, code = c.run("", "port", "close", sb.ID, "8080"); code != 0 || !strings.Contains(out, "private") || strings.Contains(out, "mpt_") {
		t.Errorf("port close: %d %q", code, out)
	}
	if out, _, code = c.run("", "port", "ls", sb.ID, "--json"); code != 0 || strings.Contains(out, "mpt_") {
		t.Errorf("port ls after close: %d %q", code, out)
	}
	if _, e, code = c.run("", "port", "open", sb.ID, "0"); code == 0 {
		t.Errorf("port 0 accepted: %q", e)
	}
}
