// Package console is moat's web console: a static page shell and vanilla JavaScript
// modules, embedded in the binary and served under /ui/ by the API server
// (internal/apiserver/session.go), which also signs people in. The pages read and change
// everything through the same /v1 API the CLI uses; they insert every text that comes from
// a sandbox with textContent, never as HTML.
//
// dist/ holds the terminal bundle (xterm.js) that `make build` makes with npm and esbuild
// from web/; it is not committed, and without it the terminal tab says so.
package console

import (
	"embed"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static dist
var files embed.FS

// Assets serves the console's files for a request path under /ui/: /ui/ is the page
// shell, /ui/dist/... the built bundle, anything else a file of static/. A directory
// listing is never served.
func Assets() http.Handler {
	static, _ := fs.Sub(files, "static")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, "/ui")), "/")
		fsys := static
		if rest, ok := strings.CutPrefix(name, "dist/"); ok {
			fsys, _ = fs.Sub(files, "dist")
			name = rest
		}
		if name == "" || name == "." {
			name = "index.html"
		}
		if fi, err := fs.Stat(fsys, name); err != nil || fi.IsDir() || name == "PLACEHOLDER" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, fsys, name)
	})
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>moat · sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/ui/style.css"></head>
<body class="login"><main>
<h1>moat</h1>
<p>Sign in with an API key (<code>moat apikey create</code> on the daemon's host).</p>
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="/ui/login">
<input type="hidden" name="login_token" value="{{.Token}}">
<label>API key <input type="password" name="key" autocomplete="off" autofocus required></label>
<button type="submit">Sign in</button>
</form></main></body></html>
`))

// Login writes the sign-in page: a form posting the API key with token, the pre-session
// token that the login cookie must match (a login CSRF defence); errMsg, when set, says
// why the last attempt failed. html/template escapes both.
func Login(w io.Writer, token, errMsg string) error {
	return loginPage.Execute(w, struct{ Token, Error string }{token, errMsg})
}
