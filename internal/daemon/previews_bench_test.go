package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// BenchmarkPreview measures a port preview's request latency (path-based, an API key,
// through the daemon's TCP listener) against a direct request to the same in-sandbox
// server dialled from the gateway namespace (Manager.DialPort), interleaved in one run,
// both over kept-alive connections; and a WebSocket echo's round trip through the preview
// against the same echo dialled directly. Reports p50/p90 in ms and the p50 difference.
func BenchmarkPreview(b *testing.B) {
	testutil.RequiresRoot(b)
	runs := benchRuns(300)
	for _, rt := range []string{"runc", "runsc"} {
		if !slices.Contains(runtimesUnderTestB(), rt) {
			continue
		}
		b.Run(rt, func(b *testing.B) {
			for range b.N {
				benchPreview(b, rt, runs)
			}
		})
	}
}

// runtimesUnderTestB is runtimesUnderTest for benchmarks.
func runtimesUnderTestB() []string {
	rts := []string{"runc", "runsc"}
	if s := os.Getenv("MOAT_TEST_RUNTIMES"); s != "" {
		rts = strings.Split(s, ",")
	}
	return rts
}

func benchPreview(b *testing.B, rt string, runs int) {
	runDir := "/run/moat-bench-" + shortID()
	addr := freeLoopbackAddrB(b)
	cfg := daemon.Config{
		DataDir: b.TempDir(), RunDir: runDir, Socket: filepath.Join(runDir, "moat.sock"), Listen: addr,
		InitPath: filepath.Join(testutil.Binaries(b), "moat-init"), IDBase: testutil.IDBase(b),
		Log:           slog.New(slog.DiscardHandler),
		DefaultLimits: sandbox.Limits{DiskBytes: 256 << 20, MemoryBytes: 512 << 20},
		RuntimePaths:  testRuntimePaths(),
	}
	d, stop, err := daemon.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	c := sdk.NewUnix(cfg.Socket)
	defer func() {
		list, _ := c.List(context.Background())
		for _, sb := range list {
			_ = c.Delete(context.Background(), sb.ID)
		}
		stop()
		os.RemoveAll(runDir)
	}()
	ctx := context.Background()
	key, err := c.CreateAPIKey(ctx)
	if err != nil {
		b.Fatal(err)
	}
	kc := sdk.NewHTTP("http://"+addr, key.Key)
	sb, err := kc.Create(ctx, v1.CreateSandboxRequest{Runtime: rt})
	if err != nil {
		b.Fatal(err)
	}
	src, err := os.ReadFile("testdata/previewsrv.py")
	if err != nil {
		b.Fatal(err)
	}
	var out strings.Builder
	code, err := c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", `cat > /tmp/previewsrv.py && (setsid python3 /tmp/previewsrv.py 8080 /dev/null >/dev/null 2>&1 </dev/null &)
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null && exit 0; sleep 0.1; done; exit 1`}, Stdin: strings.NewReader(string(src)), Stdout: &out, Stderr: &out})
	if err != nil || code != 0 {
		b.Fatalf("starting the server: %v %d %s", err, code, out.String())
	}
	direct := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.Manager.DialPort(ctx, sb.ID, 8080)
	}, MaxIdleConnsPerHost: 1}}
	preview := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	previewURL := "http://" + addr + "/preview/" + sb.ID + "/8080/x"
	get := func(cl *http.Client, url string, hdr ...string) time.Duration {
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		t0 := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		el := time.Since(t0)
		if resp.StatusCode != 200 || string(body) != "sandbox-ok /x\n" {
			b.Fatalf("%s: %d %q", url, resp.StatusCode, body)
		}
		return el
	}
	for range 20 { // warm both paths (connections, SQLite pages)
		get(direct, "http://sandbox/x")
		get(preview, previewURL, "Authorization", "Bearer "+key.Key)
	}
	var dl, pl []time.Duration
	for range runs {
		dl = append(dl, get(direct, "http://sandbox/x"))
		pl = append(pl, get(preview, previewURL, "Authorization", "Bearer "+key.Key))
	}
	// WebSocket round trips: through the preview, and dialled directly.
	wsRTT := func(conn net.Conn, host, target string, hdr ...string) []time.Duration {
		_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
		req := "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		for i := 0; i+1 < len(hdr); i += 2 {
			req += hdr[i] + ": " + hdr[i+1] + "\r\n"
		}
		if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 101 {
			b.Fatalf("upgrade: %v %v", resp, err)
		}
		w := &wsConn{conn, br}
		var rtts []time.Duration
		for range runs {
			t0 := time.Now()
			w.send(b, "ping")
			if w.recv(b) != "ping" {
				b.Fatal("bad echo")
			}
			rtts = append(rtts, time.Since(t0))
		}
		conn.Close()
		return rtts
	}
	pc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	pws := wsRTT(pc, addr, "/preview/"+sb.ID+"/8080/ws", "Authorization", "Bearer "+key.Key)
	dc, err := d.Manager.DialPort(ctx, sb.ID, 8080)
	if err != nil {
		b.Fatal(err)
	}
	dws := wsRTT(dc, "sandbox", "/ws")

	ms := func(ds []time.Duration, q float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(ms(dl, .5), "direct-p50-ms")
	b.ReportMetric(ms(dl, .9), "direct-p90-ms")
	b.ReportMetric(ms(pl, .5), "preview-p50-ms")
	b.ReportMetric(ms(pl, .9), "preview-p90-ms")
	b.ReportMetric(ms(pl, .5)-ms(dl, .5), "added-p50-ms")
	b.ReportMetric(ms(dws, .5), "ws-direct-rtt-p50-ms")
	b.ReportMetric(ms(pws, .5), "ws-preview-rtt-p50-ms")
	fmt.Fprintf(os.Stderr, "%s: direct p50 %.3f p90 %.3f ms; preview p50 %.3f p90 %.3f ms (+%.3f); ws rtt direct %.3f preview %.3f ms\n",
		rt, ms(dl, .5), ms(dl, .9), ms(pl, .5), ms(pl, .9), ms(pl, .5)-ms(dl, .5), ms(dws, .5), ms(pws, .5))
}

func freeLoopbackAddrB(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
