// Package console_test drives moat's web console (/ui/) in a real headless Chromium
// (Debian's chromium, `make deps`) through chromedp, against a real `moat serve --listen`
// on loopback with real sandboxes: sign in, create a sandbox from the page, a terminal,
// the egress log, a port preview, another key's session, an XSS file name, and a
// cross-site form post.
//
// It needs root (real runtimes), the binaries (MOAT_BIN) and chromium; the terminal needs
// the xterm.js bundle (`make build`). MOAT_CONSOLE_SCREENSHOTS=DIR also saves screenshots
// of the main pages there (docs/console: `make screenshots`... see docs/console.md).
package console_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// daemon is one `moat serve --listen` subprocess and two API keys for it.
type daemon struct {
	url       string // http://127.0.0.1:PORT
	sock      string // the unix socket: the operator
	key, key2 string
	logs      *testutil.SyncBuffer
	args      []string // moat serve's command line
	global    []string // moat's global flags (data and run directories)
	proc      *exec.Cmd
	exited    chan struct{}
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	testutil.RequiresRoot(t)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	runDir := "/run/moat-console-" + hex.EncodeToString(rnd[:])
	data := t.TempDir()
	d := &daemon{sock: filepath.Join(runDir, "moat.sock"), logs: &testutil.SyncBuffer{}}
	d.global = []string{"--data", data, "--run-dir", runDir, "--socket", d.sock,
		"--id-base", strconv.FormatUint(uint64(testutil.IDBase(t)), 10)}
	addr := testutil.FreeAddr(t)
	d.url = "http://" + addr
	d.args = append(slices.Clone(d.global), "serve", "--listen", addr, "--warm", "0", "--default-disk", "1G")
	d.start(t)
	t.Cleanup(func() {
		d.stop(t)
		if t.Failed() {
			t.Logf("moat serve output (last 32 KiB):\n%s", d.logs.Tail(32<<10))
		}
		_ = os.RemoveAll(runDir)
		drives := filepath.Join(data, "drives")
		for i := 0; i < 100; i++ {
			if b, _ := os.ReadFile("/proc/self/mountinfo"); !strings.Contains(string(b), " "+drives+" ") || syscall.Unmount(drives, 0) == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	// Sandboxes a failed test left are deleted before the daemon stops (cleanups run
	// last first): a stopped daemon leaves them running.
	t.Cleanup(func() {
		op := sdk.NewUnix(d.sock)
		list, _ := op.List(context.Background())
		for _, sb := range list {
			if err := op.Delete(context.Background(), sb.ID); err != nil {
				t.Errorf("deleting %s: %v", sb.ID, err)
			}
		}
	})
	d.key, d.key2 = d.moat(t, "apikey", "create", "--owner", "alice"), d.moat(t, "apikey", "create", "--owner", "bob")
	return d
}

// moat runs a moat command against the daemon (as the operator) and returns its output.
func (d *daemon) moat(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(testutil.Binaries(t), "moat"), append(slices.Clone(d.global), args...)...).Output()
	if err != nil {
		t.Fatalf("moat %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// start starts moat serve and waits until it answers GET /health.
func (d *daemon) start(t *testing.T) {
	t.Helper()
	d.proc = exec.Command(filepath.Join(testutil.Binaries(t), "moat"), d.args...)
	d.proc.Stdout, d.proc.Stderr = d.logs, d.logs
	if err := d.proc.Start(); err != nil {
		t.Fatalf("starting moat serve: %v", err)
	}
	exited := make(chan struct{})
	d.exited = exited
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(d.proc)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := http.Get(d.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("moat serve exited:\n%s", d.logs.Tail(32<<10))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("moat serve did not answer /health within 30s:\n%s", d.logs.Tail(32<<10))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop stops moat serve with SIGTERM (its sandboxes live on).
func (d *daemon) stop(t *testing.T) {
	_ = d.proc.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		t.Errorf("moat serve did not stop within 60s of SIGTERM; killing it")
		_ = d.proc.Process.Kill()
		<-d.exited
	}
}

// browser starts a headless Chromium of its own (its own profile: cookies) and returns
// its tab; dialogs (alert) opened in it are counted.
func browser(t *testing.T, dialogs *int) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: `make deps` installs Debian's chromium for the console's browser tests")
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(path),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 860))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	var mu sync.Mutex
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			mu.Lock()
			*dialogs++
			mu.Unlock()
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(false)) }()
		}
	})
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

func run(t *testing.T, ctx0 context.Context, timeout time.Duration, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx0, timeout)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var html string
		hctx, hcancel := context.WithTimeout(ctx0, 2*time.Second)
		defer hcancel()
		_ = chromedp.Run(hctx, chromedp.Evaluate(`(document.querySelector('#terminal .xterm-rows') ? [...document.querySelectorAll('#terminal .xterm-rows > div')].map(r => r.textContent).join('\\n') + '\\n' : '') + document.querySelector('main').outerHTML`, &html))
		t.Fatalf("%s: %v\npage: %.4000s", what, err, html)
	}
}

// waitJS polls a JavaScript expression in the page until it is true.
func waitJS(expr string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		for {
			var ok bool
			if err := chromedp.Evaluate(expr, &ok).Do(ctx); err == nil && ok {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w", expr, ctx.Err())
			case <-time.After(150 * time.Millisecond):
			}
		}
	})
}

// typeKeys types s as key presses, each one keyDown (with its text) and keyUp. (chromedp's
// SendKeys also sends a char event per key, which xterm.js takes as a second key.)
func typeKeys(s string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		for _, r := range s {
			down := input.DispatchKeyEvent(input.KeyDown).WithKey(string(r)).WithText(string(r))
			if r == '\r' {
				down = down.WithKey("Enter").WithCode("Enter").WithWindowsVirtualKeyCode(13)
			}
			if err := down.Do(ctx); err != nil {
				return err
			}
			if err := input.DispatchKeyEvent(input.KeyUp).WithKey(string(r)).Do(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}

func signIn(t *testing.T, ctx context.Context, d *daemon, key string) {
	run(t, ctx, 20*time.Second, "sign in",
		chromedp.Navigate(d.url+"/ui/"),
		chromedp.WaitVisible(`input[name=key]`), // the shell sends an unsigned-in browser to /ui/login
		chromedp.SendKeys(`input[name=key]`, key),
		chromedp.Submit(`input[name=key]`),
		chromedp.WaitVisible(`#create`),
		waitJS(`/^(alice|bob) · key-/.test(document.getElementById('who').textContent)`))
}

func TestConsoleBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser suite drives real sandboxes in Chromium (not with -short)")
	}
	begun := time.Now()
	d := startDaemon(t)
	shots := os.Getenv("MOAT_CONSOLE_SCREENSHOTS")
	shot := func(ctx context.Context, name string) {
		if shots == "" {
			return
		}
		var buf []byte
		if err := chromedp.Run(ctx, chromedp.Sleep(300*time.Millisecond), chromedp.FullScreenshot(&buf, 100)); err != nil {
			t.Errorf("screenshot %s: %v", name, err)
			return
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644); err != nil {
			t.Error(err)
		}
	}
	api := sdk.NewHTTP(d.url, d.key)
	bg := context.Background()
	dialogs := 0
	ctx := browser(t, &dialogs)

	// Sign in, and create a sandbox from the page (no allow rules: deny-all egress).
	if shots != "" {
		run(t, ctx, 10*time.Second, "sign-in page", chromedp.Navigate(d.url+"/ui/login"), chromedp.WaitVisible(`input[name=key]`))
		shot(ctx, "login")
	}
	signIn(t, ctx, d, d.key)
	var hash string
	run(t, ctx, 60*time.Second, "create a sandbox from the page",
		chromedp.SetValue(`input[name=name]`, "console-test"),
		chromedp.Click(`#create button[type=submit]`),
		waitJS(`location.hash.endsWith('/terminal')`),
		chromedp.Evaluate(`location.hash`, &hash))
	id := strings.Split(hash, "/")[2]
	sb, err := api.Get(bg, id)
	if err != nil || sb.State != "running" || sb.Name != "console-test" {
		t.Fatalf("the sandbox the page created: %+v, %v", sb, err)
	}
	t.Logf("created %s from the page after %s", id, time.Since(begun).Round(time.Millisecond))

	// The terminal: type a command, read its output off xterm's screen.
	var noBundle bool
	run(t, ctx, 15*time.Second, "terminal tab", chromedp.WaitVisible(`#terminal, #no-bundle`), chromedp.Evaluate(`!!document.getElementById('no-bundle')`, &noBundle))
	if noBundle {
		t.Fatal("the console's terminal bundle (xterm.js) is not built into this moat: `make build` runs npm ci and esbuild in internal/console/web")
	}
	run(t, ctx, 30*time.Second, "terminal",
		chromedp.WaitVisible(`#terminal .xterm-rows`),
		waitJS(`document.querySelector('#terminal .xterm-rows').textContent.trim().length > 0`), // the prompt
		chromedp.Focus(`#terminal .xterm-helper-textarea`),
		typeKeys("echo $((6*7))\r"),
		waitJS(`[...document.querySelectorAll('#terminal .xterm-rows > div')].some(r => r.textContent.trim() === '42')`))
	shot(ctx, "terminal")

	// A blocked destination appears in the egress log, live.
	run(t, ctx, 10*time.Second, "egress tab", chromedp.Navigate(d.url+"/ui/#/sandbox/"+id+"/egress"), chromedp.WaitVisible(`#egress`))
	var out bytes.Buffer
	if _, err := api.Exec(bg, id, sdk.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "curl -sS -m 3 http://203.0.113.7:8080/ 2>&1; true"}, Stdout: &out}); err != nil {
		t.Fatalf("curl in the sandbox: %v", err)
	}
	run(t, ctx, 15*time.Second, "the blocked connection in the egress log",
		waitJS(`[...document.querySelectorAll('#egress tbody tr')].some(r => r.querySelector('.blocked') && r.textContent.includes('203.0.113.7'))`))
	shot(ctx, "egress")
	if shots != "" {
		run(t, ctx, 10*time.Second, "policy tab", chromedp.Navigate(d.url+"/ui/#/sandbox/"+id+"/policy"), chromedp.WaitVisible(`#phase`))
		shot(ctx, "policy")
	}

	// A file named like markup is shown as text: no element made of it, no alert.
	const evil = `<img src=x onerror=alert(1)>`
	if err := api.WriteFile(bg, id, "~/"+evil, "", strings.NewReader("x")); err != nil {
		t.Fatalf("writing the file: %v", err)
	}
	var imgs int
	var names []string
	run(t, ctx, 15*time.Second, "files tab",
		chromedp.Navigate(d.url+"/ui/#/sandbox/"+id+"/files"),
		waitJS(`[...document.querySelectorAll('#files .file-name')].some(e => e.textContent === `+strconv.Quote(evil)+`)`),
		chromedp.Sleep(500*time.Millisecond), // time for an injected image's onerror to fire
		chromedp.Evaluate(`document.querySelectorAll('img').length`, &imgs),
		chromedp.Evaluate(`[...document.querySelectorAll('#files .file-name')].map(e => e.textContent)`, &names))
	if imgs != 0 || dialogs != 0 || !slices.Contains(names, evil) {
		t.Fatalf("the file name %q: %d img elements, %d dialogs, names %q", evil, imgs, dialogs, names)
	}
	shot(ctx, "files")

	// Upload a file from the page, then download it back from the page.
	dir := t.TempDir()
	up := filepath.Join(dir, "upload.txt")
	const content = "uploaded from the console\n"
	if err := os.WriteFile(up, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	downloads := t.TempDir()
	run(t, ctx, 20*time.Second, "upload and download from the files tab",
		cdpbrowser.SetDownloadBehavior(cdpbrowser.SetDownloadBehaviorBehaviorAllow).WithDownloadPath(downloads),
		chromedp.SetUploadFiles(`#upload`, []string{up}),
		chromedp.Click(`#files-upload`),
		waitJS(`[...document.querySelectorAll('#files .file-name')].some(e => e.textContent === 'upload.txt')`),
		chromedp.Evaluate(`[...document.querySelectorAll('#files tr')].find(r => r.textContent.includes('upload.txt')).querySelector('button').click()`, nil),
		chromedp.ActionFunc(func(ctx context.Context) error {
			for {
				if b, err := os.ReadFile(filepath.Join(downloads, "upload.txt")); err == nil && string(b) == content {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("the download never arrived in %s: %w", downloads, ctx.Err())
				case <-time.After(100 * time.Millisecond):
				}
			}
		}))
	var in bytes.Buffer
	if f, err := api.ReadFile(bg, id, "~/upload.txt", ""); err != nil {
		t.Fatalf("the uploaded file in the sandbox: %v", err)
	} else {
		_, _ = in.ReadFrom(f)
		f.Close()
	}
	if in.String() != content {
		t.Fatalf("the uploaded file holds %q, want %q", in.String(), content)
	}
	// The other tabs and the daemon-wide pages load from their /v1 routes without an error.
	for _, page := range []string{"#/sandbox/" + id + "/overview", "#/sandbox/" + id + "/events", "#/sandbox/" + id + "/snapshots",
		"#/sandbox/" + id + "/changes", "#/approvals", "#/snapshots"} {
		var errText string
		run(t, ctx, 10*time.Second, "page "+page,
			chromedp.Navigate(d.url+"/ui/"+page),
			waitJS(`document.querySelector('main h1') && !document.querySelector('main').textContent.includes('Loading')`),
			chromedp.Sleep(300*time.Millisecond),
			chromedp.Evaluate(`[...document.querySelectorAll('main .error')].map(e => e.textContent).join('; ')`, &errText))
		if errText != "" {
			t.Errorf("page %s shows an error: %s", page, errText)
		}
	}
	run(t, ctx, 10*time.Second, "events tab", chromedp.Navigate(d.url+"/ui/#/sandbox/"+id+"/events"),
		waitJS(`[...document.querySelectorAll('#events td')].some(td => td.textContent === 'create' || td.textContent === 'created' || td.textContent === 'started')`))
	run(t, ctx, 10*time.Second, "list page", chromedp.Navigate(d.url+"/ui/#/"), chromedp.WaitVisible(`#sandboxes`))
	shot(ctx, "sandboxes")

	// A cross-site form post (127.0.0.2 is another site) cannot stop the sandbox: the
	// Strict cookie stays home, and without the CSRF header the gate would refuse anyway.
	target := d.url + "/v1/sandboxes/" + id + "/stop"
	attacker := attackerSite(t, target)
	var landed string
	run(t, ctx, 15*time.Second, "cross-site form post",
		chromedp.Navigate(attacker),
		waitJS(`location.href === `+strconv.Quote(target)),
		chromedp.Evaluate(`location.href`, &landed))
	if sb, err := api.Get(bg, id); err != nil || sb.State != "running" {
		t.Fatalf("after the cross-site post the sandbox is %+v, %v; want running", sb, err)
	}
	if evs, _ := api.Events(bg, id); slices.ContainsFunc(evs, func(e v1.Event) bool { return strings.Contains(e.Kind, "stop") }) {
		t.Fatalf("the sandbox has a stop event after the cross-site post: %+v", evs)
	}

	// A second key's session sees neither the sandbox's page nor, through the API, it.
	ctx2 := browser(t, &dialogs)
	signIn(t, ctx2, d, d.key2)
	var listed string
	run(t, ctx2, 15*time.Second, "the other key's view",
		chromedp.Navigate(d.url+"/ui/#/sandbox/"+id),
		chromedp.WaitVisible(`#notfound`),
		chromedp.Evaluate(`fetch('/v1/sandboxes/`+id+`').then(r => String(r.status))`, &listed, awaitPromise))
	if listed != "404" {
		t.Fatalf("the other key's session GET /v1/sandboxes/%s = %s, want 404", id, listed)
	}
	if _, err := sdk.NewHTTP(d.url, d.key2).Get(bg, id); err == nil {
		t.Fatal("the other key reads the private sandbox through the API")
	}

	// A preview of a web server in the sandbox, opened from the ports tab.
	t.Run("preview", func(t *testing.T) {
		resp, err := authGet(d.url+"/v1/sandboxes/"+id+"/ports", d.key)
		if err != nil {
			t.Fatal(err)
		}
		if resp == http.StatusNotFound {
			t.Skip("GET /v1/sandboxes/{id}/ports answers 404: this daemon has no port previews yet (they arrive with the previews branch)")
		}
		const page = "hello from the sandbox preview"
		if _, err := api.Exec(bg, id, sdk.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c",
			"mkdir -p /tmp/site && echo '" + page + "' > /tmp/site/index.html && (setsid python3 -m http.server 8000 --bind 0.0.0.0 --directory /tmp/site >/dev/null 2>&1 &) && sleep 0.5"}}); err != nil {
			t.Fatal(err)
		}
		var href, text string
		run(t, ctx, 20*time.Second, "open a preview from the ports tab",
			chromedp.Navigate(d.url+"/ui/#/sandbox/"+id+"/ports"),
			chromedp.WaitVisible(`#port`),
			chromedp.SetValue(`#port`, "8000"),
			chromedp.Click(`#open-port`),
			chromedp.WaitVisible(`a.preview[data-port="8000"]`),
			chromedp.AttributeValue(`a.preview[data-port="8000"]`, "href", &href, nil))
		shot(ctx, "ports")
		run(t, ctx, 20*time.Second, "read the preview",
			chromedp.Navigate(d.url+href),
			waitJS(`document.body && document.body.textContent.includes(`+strconv.Quote(page)+`)`),
			chromedp.Text(`body`, &text))
		// The preview shares the daemon's origin: its scripts must not act as the console.
		// A script there reads the session's CSRF token if it can and stops the sandbox
		// with it; the sandbox must stay running (asserted at the daemon).
		var tried string
		run(t, ctx, 10*time.Second, "the preview's scripts against the console",
			chromedp.Evaluate(`(async () => {
				let tok = 'guess', out = '';
				try {
					const r = await fetch('/ui/session', {credentials: 'include'});
					const body = await r.text();
					out += 'session ' + r.status + ' ' + body.slice(0, 40);
					try { tok = JSON.parse(body).csrf_token || tok; } catch (_) {}
				} catch (e) { out += 'session refused: ' + e; }
				try {
					const r = await fetch('/v1/sandboxes/`+id+`/stop', {method: 'POST', credentials: 'include', headers: {'X-CSRF-Token': tok}});
					out += '; stop ' + r.status;
				} catch (e) { out += '; stop refused: ' + e; }
				return out;
			})()`, &tried, awaitPromise))
		t.Logf("a script of the preview page: %s", tried)
		if strings.Contains(tried, "csrf_token") {
			t.Errorf("a preview page read the console's session: %s", tried)
		}
		if sb, err := api.Get(bg, id); err != nil || sb.State != "running" {
			t.Fatalf("after the preview page's stop the sandbox is %+v, %v; want running", sb, err)
		}
	})

	// Stop and start from the page; the daemon's record follows.
	run(t, ctx, 60*time.Second, "stop and start from the page",
		chromedp.Navigate(d.url+"/ui/#/"),
		chromedp.WaitVisible(`#sandboxes button[data-action=stop]`),
		chromedp.Click(`#sandboxes button[data-action=stop]`),
		chromedp.WaitVisible(`#sandboxes button[data-action=start]`),
		chromedp.ActionFunc(func(context.Context) error {
			if sb, err := api.Get(bg, id); err != nil || sb.State != "stopped" {
				return fmt.Errorf("after Stop on the page the sandbox is %+v, %v", sb, err)
			}
			return nil
		}),
		chromedp.Click(`#sandboxes button[data-action=start]`),
		chromedp.WaitVisible(`#sandboxes button[data-action=stop]`))
	if sb, err := api.Get(bg, id); err != nil || sb.State != "running" {
		t.Fatalf("after Start on the page the sandbox is %+v, %v", sb, err)
	}

	// Delete from the page (two clicks), and the daemon has no such sandbox.
	run(t, ctx, 30*time.Second, "delete from the page",
		chromedp.Navigate(d.url+"/ui/#/"),
		chromedp.WaitVisible(`#sandboxes button[data-action=delete]`),
		chromedp.Click(`#sandboxes button[data-action=delete]`),
		chromedp.Click(`#sandboxes button[data-action=delete]`),
		waitJS(`!document.querySelector('#sandboxes') || !document.querySelector('#sandboxes').textContent.includes(`+strconv.Quote(id)+`)`))
	if _, err := api.Get(bg, id); err == nil {
		t.Fatal("the sandbox deleted from the page still exists")
	}
	if dialogs != 0 {
		t.Fatalf("%d JavaScript dialogs opened during the test", dialogs)
	}
	t.Logf("browser suite: %s", time.Since(begun).Round(time.Millisecond))
}

func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }

func authGet(url, key string) (int, error) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// attackerSite serves, on 127.0.0.2 (another site than the daemon's 127.0.0.1), a page
// whose form posts itself to target at once.
func attackerSite(t *testing.T, target string) string {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id=f method=post action="%s"><input name=x value=1></form><script>document.getElementById('f').submit()</script>`, target)
	})}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Log(err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String() + "/"
}
