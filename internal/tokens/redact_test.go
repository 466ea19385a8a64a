package tokens

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/testutil/fakegithub"
)

// TestTokenNeverPrints prints tokens, their values and the provider holding them every
// way the daemon might, and looks for the value, the key and the JWT in the output.
func TestTokenNeverPrints(t *testing.T) {
	f := newFakeGitHub(t, newClock())
	p := newApp(t, appConfig(f))
	tok, err := p.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	val := tok.Value.Reveal()
	type holder struct {
		tok Token // unexported: fmt cannot call Token's or Secret's methods
		Tok Token
	}
	h := holder{tok, tok}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		for _, v := range []any{tok, &tok, tok.Value, &tok.Value, []Token{tok}, map[string]Token{"k": tok}, h, &h, p} {
			out = append(out, fmt.Sprintf(verb, v))
		}
	}
	out = append(out, fmt.Sprint(tok, h), fmt.Sprintln(tok.Value, p))
	for _, v := range []any{tok, &tok, tok.Value, []Token{tok}, h} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	if b, _ := tok.Value.MarshalText(); string(b) != redacted {
		t.Errorf("MarshalText = %s", b)
	}
	var logs bytes.Buffer
	for _, hnd := range []slog.Handler{slog.NewTextHandler(&logs, nil), slog.NewJSONHandler(&logs, nil)} {
		slog.New(hnd).Info("minted", "token", tok, "value", tok.Value, "ptr", &tok, "holder", h, "provider", p)
	}
	out = append(out, logs.String())
	all := strings.Join(out, "\n")
	if strings.Contains(all, val) || strings.Contains(all, val[4:]) {
		t.Fatalf("the token value was printed:\n%s", all)
	}
	noSecrets(t, f, "printed forms", all)
	if d := fakegithub.AppKey().D.String(); strings.Contains(all, d[:20]) {
		t.Errorf("the private key was printed")
	}
	if !strings.Contains(logs.String(), `"expires_at":"`+tok.ExpiresAt.Format(time.RFC3339)) {
		t.Errorf("slog lost the expiry: %s", logs.String())
	}
	if !strings.Contains(fmt.Sprint(p), "GitHub App 12345 installation 42") {
		t.Errorf("provider prints as %q", fmt.Sprint(p))
	}
}

func TestSecretZero(t *testing.T) {
	var s Secret
	if !s.Empty() || s.Reveal() != "" || fmt.Sprint(s) != redacted {
		t.Errorf("zero Secret: Empty %v, Reveal %q, prints %q", s.Empty(), s.Reveal(), fmt.Sprint(s))
	}
}
