package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const plain = "hunter2-s3cr3t-VALUE"

// leaks reports how out shows the secret, if it does: as itself, its hex, its base64, or
// fmt's rendering of its bytes.
func leaks(out string) string {
	b := []byte(plain)
	for _, form := range []string{
		plain,
		hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
		base64.StdEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
		strings.Trim(fmt.Sprint(b), "[]"), // "104 117 110 ..."
		fmt.Sprintf("%#v", b)[len("[]byte{"):20],
	} {
		if strings.Contains(out, form) {
			return form
		}
	}
	return ""
}

func checkRedacted(t *testing.T, what, out string) {
	t.Helper()
	if form := leaks(out); form != "" {
		t.Errorf("%s leaks the secret (as %q): %s", what, form, out)
	}
}

func TestValueRedactsInFmt(t *testing.T) {
	v := NewValue(plain)
	type exported struct{ Token Value }
	type unexported struct{ token Value }
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%-8v", "% x", "%#x", "%T %v"} {
		out := fmt.Sprintf(verb, v)
		checkRedacted(t, verb, out)
		if verb != "%T %v" && !strings.Contains(out, redacted) {
			t.Errorf("%s: %q, want %q", verb, out, redacted)
		}
		for name, x := range map[string]any{
			"pointer":           &v,
			"slice":             []Value{v},
			"map":               map[string]Value{"k": v},
			"exported field":    exported{v},
			"exported field *":  &exported{v},
			"unexported field":  unexported{v},
			"unexported field*": &unexported{v},
			"any slice":         []any{v},
		} {
			checkRedacted(t, verb+" "+name, fmt.Sprintf(verb, x))
		}
	}
	if got := v.String(); got != redacted {
		t.Errorf("String() = %q", got)
	}
	if got := v.GoString(); got != redacted {
		t.Errorf("GoString() = %q", got)
	}
	checkRedacted(t, "Sprint", fmt.Sprint(v, &v))
	checkRedacted(t, "Sprintln", fmt.Sprintln(v))
}

func TestValueRedactsInErrors(t *testing.T) {
	v := NewValue(plain)
	for _, err := range []error{
		fmt.Errorf("x: %v", v),
		fmt.Errorf("x: %s: %w", v, errors.New("inner")),
		fmt.Errorf("x: %+v", struct{ V Value }{v}),
		errors.Join(errors.New(fmt.Sprint(v))),
	} {
		checkRedacted(t, "error", err.Error())
	}
}

func TestValueRedactsInJSON(t *testing.T) {
	v := NewValue(plain)
	for name, x := range map[string]any{
		"value":   v,
		"pointer": &v,
		"struct":  struct{ Token Value }{v},
		"map":     map[string]Value{"k": v},
		"slice":   []Value{v},
	} {
		b, err := json.Marshal(x)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkRedacted(t, "json "+name, string(b))
		if !bytes.Contains(b, []byte(`"[redacted]"`)) {
			t.Errorf("json %s: %s", name, b)
		}
	}
	txt, err := v.MarshalText()
	if err != nil || string(txt) != redacted {
		t.Errorf("MarshalText: %q, %v", txt, err)
	}
	// A Value as a map key goes through MarshalText.
	b, err := json.Marshal(map[Value]int{v: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkRedacted(t, "json map key", string(b))
}

func TestValueRedactsInSlog(t *testing.T) {
	v := NewValue(plain)
	var buf bytes.Buffer
	for name, h := range map[string]slog.Handler{
		"text": slog.NewTextHandler(&buf, &slog.HandlerOptions{AddSource: true}),
		"json": slog.NewJSONHandler(&buf, nil),
	} {
		buf.Reset()
		log := slog.New(h)
		log.Info("setting", "secret", v)
		log.Info("setting", slog.Any("ptr", &v))
		log.With("w", v).WithGroup("g").Info("setting", slog.Group("grp", "s", v))
		log.Error("failed", "err", fmt.Errorf("x: %v", v))
		log.Info("struct", "s", struct{ Token Value }{v}, "u", struct{ token Value }{v})
		log.Info("slice", "s", []Value{v}, "m", map[string]Value{"k": v})
		out := buf.String()
		checkRedacted(t, name+" handler", out)
		if strings.Count(out, redacted) < 6 {
			t.Errorf("%s handler: %s", name, out)
		}
	}
}

func TestValueAccessors(t *testing.T) {
	v := NewValue(plain)
	if v.Reveal() != plain || v.Empty() {
		t.Fatalf("Reveal %q, Empty %v", v.Reveal(), v.Empty())
	}
	if !v.Equal(plain) || v.Equal(plain+"x") || v.Equal("") || v.Equal(plain[:3]) {
		t.Fatal("Equal")
	}
	var zero Value
	if !zero.Empty() || zero.Reveal() != "" || !zero.Equal("") || zero.Equal("a") {
		t.Fatal("zero Value")
	}
	if fmt.Sprint(zero) != redacted {
		t.Fatalf("zero Value prints %q", fmt.Sprint(zero))
	}
	if !NewValue("").Empty() {
		t.Fatal(`NewValue("") not empty`)
	}
	// NewValue copies: changing the source afterwards changes nothing.
	src := []byte("abc")
	w := NewValue(string(src))
	src[0] = 'x'
	if w.Reveal() != "abc" {
		t.Fatal("NewValue shares memory")
	}
}
