package console

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAssets(t *testing.T) {
	for path, want := range map[string]int{
		"/ui/":                  200,
		"/ui/app.js":            200,
		"/ui/style.css":         200,
		"/ui/index.html":        301, // http.ServeFileFS sends …/index.html to …/
		"/ui/nope.js":           404,
		"/ui/dist/":             404, // no listings
		"/ui/dist/PLACEHOLDER":  404,
		"/ui/../console.go":     404,
		"/ui/%2e%2e/console.go": 404,
		"/ui/static/app.js":     404,
	} {
		rec := httptest.NewRecorder()
		Assets().ServeHTTP(rec, httptest.NewRequest("GET", "http://moat"+path, nil))
		if rec.Code != want {
			t.Errorf("GET %s = %d, want %d", path, rec.Code, want)
		}
	}
	rec := httptest.NewRecorder()
	Assets().ServeHTTP(rec, httptest.NewRequest("GET", "/ui/", nil))
	if body := rec.Body.String(); !strings.Contains(body, `<script type="module" src="/ui/app.js">`) || strings.Contains(body, "<script>") {
		t.Errorf("the shell: %q", body)
	}
}

// TestNoHTMLSinks: the page script never inserts markup (every text goes through el()'s
// text nodes); a new innerHTML, outerHTML, insertAdjacentHTML or document.write is a
// review point, not a convenience.
func TestNoHTMLSinks(t *testing.T) {
	js, err := files.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if bytes.Contains(js, []byte(sink)) {
			t.Errorf("static/app.js uses %s", sink)
		}
	}
}

func TestLoginEscapes(t *testing.T) {
	var b bytes.Buffer
	if err := Login(&b, `"><script>`, `<img src=x>`); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<script>") || strings.Contains(b.String(), "<img") {
		t.Fatalf("the login page does not escape: %s", b.String())
	}
}
