package sandbox_test

// Unit tests of sandbox.Manager against small fakes of its subsystems (runtime, storage,
// network, egress, namespaces) and the real SQLite store: no container, mount or kernel
// namespace is made, so failures can be injected at every step and what each step made
// can be checked to be undone. The sandbox's run directory is still prepared for real
// (its owner group is the sandbox's host gid), which needs root.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/store"
)

var errInjected = errors.New("injected failure")

// world records what the fakes hold, and which step fails next.
type world struct {
	mu      sync.Mutex
	failAt  string          // the step to fail: "drive", "ns", "net", "egress", "mount", "start", "health"
	drives  map[string]bool // id → drive exists
	mounts  map[string]bool
	nets    map[string]bool
	ns      map[string]bool
	egress  map[string]bool
	conts   map[string]*os.File // running containers: id → their hold on the init output
	alive   map[string]bool     // containers Running reports (default: those in conts)
	oom     map[string]uint64   // containers' OOM-kill counters (default 0)
	healthy bool
	addr    string // the loopback server answering every sandbox's /health
}

func (w *world) fail(step string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failAt == step {
		return fmt.Errorf("%s: %w", step, errInjected)
	}
	return nil
}

func (w *world) set(m map[string]bool, id string, v bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v {
		m[id] = true
	} else {
		delete(m, id)
	}
}

// leftovers lists what the fakes still hold of sandbox id.
func (w *world) leftovers(id string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name, m := range map[string]map[string]bool{"drive": w.drives, "mount": w.mounts, "network": w.nets, "namespaces": w.ns, "egress": w.egress} {
		if m[id] {
			out = append(out, name)
		}
	}
	if w.conts[id] != nil {
		out = append(out, "container")
	}
	sort.Strings(out)
	return out
}

type fakeRuntime struct{ w *world }

func (r fakeRuntime) Name() string { return "runc" }
func (r fakeRuntime) Start(ctx context.Context, spec sandbox.ContainerSpec) error {
	if err := r.w.fail("start"); err != nil {
		return err
	}
	// The container holds the write end of its output, as runc's would.
	fd, err := syscall.Dup(int(spec.Output.File().Fd()))
	if err != nil {
		return err
	}
	r.w.mu.Lock()
	r.w.conts[spec.ID] = os.NewFile(uintptr(fd), "init output")
	r.w.mu.Unlock()
	return nil
}
func (r fakeRuntime) Stop(ctx context.Context, id string) error {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if f := r.w.conts[id]; f != nil {
		f.Close()
	}
	delete(r.w.conts, id)
	return nil
}
func (r fakeRuntime) Running(ctx context.Context, id string) (bool, error) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if v, ok := r.w.alive[id]; ok {
		return v, nil
	}
	return r.w.conts[id] != nil, nil
}
func (r fakeRuntime) Update(context.Context, string, sandbox.Limits) error { return nil }
func (r fakeRuntime) Pause(context.Context, string) error                  { return nil }
func (r fakeRuntime) Resume(context.Context, string) error                 { return nil }
func (r fakeRuntime) Stats(context.Context, string) (sandbox.Stats, error) {
	return sandbox.Stats{}, errdefs.ErrUnavailable
}
func (r fakeRuntime) OOMKills(_ context.Context, id string) (uint64, error) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return r.w.oom[id], nil
}

type fakeStorage struct{ w *world }

func (s fakeStorage) Template(ctx context.Context, name string) (sandbox.Template, error) {
	if name != "host" {
		return sandbox.Template{}, fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
	}
	return sandbox.Template{Name: name}, nil
}
func (s fakeStorage) RepoLayer(context.Context, string) (sandbox.Layer, error) {
	return sandbox.Layer{}, errdefs.ErrNotImplemented
}
func (s fakeStorage) CreateDrive(ctx context.Context, id string, size int64) error {
	if err := s.w.fail("drive"); err != nil {
		return err
	}
	s.w.set(s.w.drives, id, true)
	return nil
}
func (s fakeStorage) Mount(ctx context.Context, req sandbox.MountRequest) error {
	if err := s.w.fail("mount"); err != nil {
		return err
	}
	// A root with an /etc/passwd naming "user", as resolveUser reads it.
	if err := os.MkdirAll(filepath.Join(req.Target, "etc"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(req.Target, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"), 0o644); err != nil {
		return err
	}
	s.w.set(s.w.mounts, req.ID, true)
	return nil
}
func (s fakeStorage) Unmount(ctx context.Context, id, target string) error {
	s.w.set(s.w.mounts, id, false)
	return nil
}
func (s fakeStorage) DeleteDrive(ctx context.Context, id string) error {
	s.w.set(s.w.drives, id, false)
	return nil
}

// fakeNetwork reaches every running sandbox's moat-init at one loopback server, which
// answers /health with 200 while the world is healthy.
type fakeNetwork struct{ w *world }

func (n fakeNetwork) Setup(ctx context.Context, id, sandboxNS string) error {
	if err := n.w.fail("net"); err != nil {
		return err
	}
	n.w.set(n.w.nets, id, true)
	return nil
}
func (n fakeNetwork) Teardown(ctx context.Context, id string) error {
	n.w.set(n.w.nets, id, false)
	return nil
}
func (n fakeNetwork) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	n.w.mu.Lock()
	up := n.w.conts[id] != nil
	n.w.mu.Unlock()
	if !up {
		return nil, fmt.Errorf("sandbox %s: connection refused", id)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", n.w.addr)
}

type fakeEgress struct{ w *world }

func (e fakeEgress) Attach(id string, spec policy.Spec, creds []sandbox.Credential, git sandbox.GitSettings) (string, error) {
	if err := e.w.fail("egress"); err != nil {
		return "", err
	}
	e.w.set(e.w.egress, id, true)
	return "", nil
}
func (e fakeEgress) SetPolicy(string, policy.Spec) (int, error) { return 0, nil }
func (e fakeEgress) Detach(id string)                           { e.w.set(e.w.egress, id, false) }
func (e fakeEgress) Forget(string)                              {}

type fakeNS struct{ w *world }

func (n fakeNS) Create(userns, netns string, ids sandbox.IDRange) error {
	if err := n.w.fail("ns"); err != nil {
		return err
	}
	n.w.set(n.w.ns, filepath.Base(filepath.Dir(userns)), true)
	return nil
}
func (n fakeNS) Remove(userns, netns string) error {
	n.w.set(n.w.ns, filepath.Base(filepath.Dir(userns)), false)
	return nil
}

type fakeEnv struct {
	t   *testing.T
	w   *world
	st  *store.Store
	m   *sandbox.Manager
	run string
	// onList, when set, runs (once) inside the manager's next List of the store, before
	// it returns: a change made there is one the caller's listing does not show.
	onList func()
	// onGet, likewise, runs (once) inside the manager's next Get.
	onGet func()
	// hostRoot: managers made from now on get a runc that cannot give sandboxes their user
	// namespace (as runsc 2022-12).
	hostRoot bool
}

// hostRootRuntime is the fake runtime, unable to run sandboxes in their user namespace.
type hostRootRuntime struct{ fakeRuntime }

func (hostRootRuntime) MapsUsers() bool { return false }

// hookedStore is the store as the manager sees it, with the env's List hook.
type hookedStore struct {
	*store.Store
	e *fakeEnv
}

func (h hookedStore) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	sb, err := h.Store.Get(ctx, id)
	if fn := h.e.onGet; fn != nil {
		h.e.onGet = nil
		fn()
	}
	return sb, err
}

func (h hookedStore) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	list, err := h.Store.List(ctx)
	if fn := h.e.onList; fn != nil {
		h.e.onList = nil
		fn()
	}
	return list, err
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the sandbox's run directory is given to its host gid: needs root")
	}
	w := &world{drives: map[string]bool{}, mounts: map[string]bool{}, nets: map[string]bool{}, ns: map[string]bool{},
		egress: map[string]bool{}, conts: map[string]*os.File{}, alive: map[string]bool{}, oom: map[string]uint64{}, healthy: true}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" { // a stream that never ends: a process with no output
			rw.WriteHeader(http.StatusOK)
			rw.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		w.mu.Lock()
		ok := w.healthy && w.failAt != "health"
		w.mu.Unlock()
		if !ok {
			http.Error(rw, "not ready", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	w.addr = srv.Listener.Addr().String()
	st, err := store.Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &fakeEnv{t: t, w: w, st: st, run: t.TempDir()}
	e.m = e.manager()
	return e
}

// manager makes a Manager over the env's fakes and store (a second one: a restarted daemon).
func (e *fakeEnv) manager() *sandbox.Manager {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var rt sandbox.Runtime = fakeRuntime{e.w}
	if e.hostRoot {
		rt = hostRootRuntime{fakeRuntime{e.w}}
	}
	m := sandbox.NewManager(sandbox.Config{
		RunDir: e.run, DataDir: e.t.TempDir(), InitPath: "/bin/true", HealthTimeout: 2 * time.Second,
		DefaultLimits: sandbox.Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 64, DiskBytes: 64 << 20},
		Host:          sandbox.Capacity{MemoryBytes: 8 << 30, CPUs: 2, Pids: 1 << 20, FileMax: 1 << 20, DiskBytes: 1 << 40},
	}, sandbox.Deps{Store: hookedStore{e.st, e}, Runtimes: map[string]sandbox.Runtime{"runc": rt},
		Storage: fakeStorage{e.w}, Network: fakeNetwork{e.w}, Egress: fakeEgress{e.w}, Namespaces: fakeNS{e.w}, Log: log})
	e.t.Cleanup(func() { m.Close() })
	return m
}

// TestCreateFailureAtEachStep: a create that fails at any step of start-up returns the
// error and leaves nothing: no record (once background work is done), drive, mount,
// network, namespaces, egress, container or run directory.
func TestCreateFailureAtEachStep(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	sb, err := e.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatalf("create with nothing failing: %v", err)
	}
	if sb.State != sandbox.StateRunning || sb.User != "user" {
		t.Fatalf("created: %s as %q", sb.State, sb.User)
	}
	if got := e.w.leftovers(sb.ID); !slices.Equal(got, []string{"container", "drive", "egress", "mount", "namespaces", "network"}) {
		t.Fatalf("a running sandbox holds %v", got)
	}
	for _, step := range []string{"drive", "ns", "net", "egress", "mount", "start", "health"} {
		t.Run(step, func(t *testing.T) {
			e.w.mu.Lock()
			e.w.failAt = step
			e.w.mu.Unlock()
			before, _ := e.m.List(ctx)
			_, err := e.m.Create(ctx, sandbox.CreateOptions{})
			if err == nil {
				t.Fatal("the create succeeded")
			}
			if step != "health" && !errors.Is(err, errInjected) {
				t.Errorf("error %v does not carry the step's failure", err)
			}
			e.m.Wait()
			after, _ := e.m.List(ctx)
			if len(after) != len(before) {
				t.Errorf("%d sandboxes before, %d after: the failed create left a record", len(before), len(after))
			}
			e.w.mu.Lock()
			for id := range e.w.drives {
				if id != sb.ID {
					t.Errorf("left of %s: %v", id, "drive")
				}
			}
			for _, m := range []map[string]bool{e.w.mounts, e.w.nets, e.w.ns, e.w.egress} {
				for id := range m {
					if id != sb.ID {
						t.Errorf("left of %s: %v", id, m)
					}
				}
			}
			for id := range e.w.conts {
				if id != sb.ID {
					t.Errorf("container %s left", id)
				}
			}
			e.w.failAt = ""
			e.w.mu.Unlock()
			entries, _ := os.ReadDir(filepath.Join(e.run, "sandboxes"))
			for _, en := range entries {
				if en.Name() != sb.ID {
					t.Errorf("run directory %s left", en.Name())
				}
			}
		})
	}
	if err := e.m.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.m.Wait()
	if got := e.w.leftovers(sb.ID); len(got) != 0 {
		t.Errorf("deleted sandbox holds %v", got)
	}
	if _, err := e.st.Get(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleted sandbox's record: %v", err)
	}
}

// TestStartFailureStops: a start that fails at a step records the sandbox stopped with the
// reason, tears down what the start made and keeps the drive.
func TestStartFailureStops(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	sb, err := e.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := e.w.leftovers(sb.ID); !slices.Equal(got, []string{"drive"}) {
		t.Fatalf("a stopped sandbox holds %v, want its drive only", got)
	}
	for _, step := range []string{"ns", "net", "egress", "mount", "start", "health"} {
		e.w.mu.Lock()
		e.w.failAt = step
		e.w.mu.Unlock()
		if _, err := e.m.Start(ctx, sb.ID); err == nil {
			t.Fatalf("start failing at %s succeeded", step)
		}
		cur, err := e.st.Get(ctx, sb.ID)
		if err != nil || cur.State != sandbox.StateStopped || cur.Error == "" {
			t.Errorf("after a start failing at %s: %+v %v, want stopped with the reason", step, cur, err)
		}
		if got := e.w.leftovers(sb.ID); !slices.Equal(got, []string{"drive"}) {
			t.Errorf("after a start failing at %s the sandbox holds %v, want its drive only", step, got)
		}
	}
	e.w.mu.Lock()
	e.w.failAt = ""
	e.w.mu.Unlock()
	if cur, err := e.m.Start(ctx, sb.ID); err != nil || cur.State != sandbox.StateRunning || cur.Error != "" {
		t.Fatalf("start once nothing fails: %+v %v", cur, err)
	}
}

// TestReconcileBranches: a restarted daemon finishes a deletion, removes a half-made
// create, stops one interrupted while starting, adopts a running sandbox whose container
// lives and stops one whose container is gone, and leaves stopped ones stopped.
func TestReconcileBranches(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	mk := func() *sandbox.Sandbox {
		sb, err := e.m.Create(ctx, sandbox.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	set := func(id string, fn func(*sandbox.Sandbox)) {
		if _, err := e.st.Update(ctx, id, func(s *sandbox.Sandbox) error { fn(s); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	deleting, provisioning, starting, alive, dead, stopped := mk(), mk(), mk(), mk(), mk(), mk()
	set(deleting.ID, func(s *sandbox.Sandbox) { s.State = sandbox.StateDeleting })
	set(provisioning.ID, func(s *sandbox.Sandbox) { s.State, s.Provisioning = sandbox.StateCreating, true })
	set(starting.ID, func(s *sandbox.Sandbox) { s.State = sandbox.StateCreating })
	if _, err := e.m.Stop(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	// The first daemon ends as serve ends it; had it stayed, its watch on the dead
	// sandbox's output would race the restarted daemon to record the death.
	e.m.CloseLogs()
	e.m.Close()
	e.w.mu.Lock()
	e.w.alive[dead.ID] = false // its container died while no daemon ran
	e.w.mu.Unlock()
	m2 := e.manager() // a restarted daemon over the same store and host
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	m2.Wait()
	for _, id := range []string{deleting.ID, provisioning.ID} {
		if _, err := e.st.Get(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s: record %v, want removed", id, err)
		}
		if got := e.w.leftovers(id); len(got) != 0 {
			t.Errorf("%s holds %v, want nothing", id, got)
		}
	}
	want := map[string]struct {
		state sandbox.State
		holds []string
	}{
		starting.ID: {sandbox.StateStopped, []string{"drive"}},
		alive.ID:    {sandbox.StateRunning, []string{"container", "drive", "egress", "mount", "namespaces", "network"}},
		dead.ID:     {sandbox.StateStopped, []string{"drive"}},
		stopped.ID:  {sandbox.StateStopped, []string{"drive"}},
	}
	for id, w := range want {
		cur, err := e.st.Get(ctx, id)
		if err != nil || cur.State != w.state {
			t.Errorf("%s: %v %v, want %s", id, cur.State, err, w.state)
		}
		if got := e.w.leftovers(id); !slices.Equal(got, w.holds) {
			t.Errorf("%s holds %v, want %v", id, got, w.holds)
		}
	}
	if cur, _ := e.st.Get(ctx, dead.ID); !strings.Contains(cur.Error, "gone") {
		t.Errorf("the dead sandbox's reason: %q", cur.Error)
	}
}

// TestExpireRacesSetTimeout: an expiry pass whose listing still shows a passed deadline,
// while the timeout was moved later meanwhile, does not stop the sandbox (the deadline is
// looked at again under its lock); once the new deadline passes, it is stopped with
// stop_reason timeout.
func TestExpireRacesSetTimeout(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	sb, err := e.m.Create(ctx, sandbox.CreateOptions{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e.onList = func() {
		if _, err := e.m.SetTimeout(ctx, sb.ID, 10*time.Hour); err != nil {
			t.Error(err)
		}
	}
	e.m.Expire(ctx, time.Now().Add(2*time.Hour)) // its listing: the 1 h deadline has passed
	if e.onList != nil {
		t.Fatal("Expire did not list the sandboxes")
	}
	cur, err := e.st.Get(ctx, sb.ID)
	if err != nil || cur.State != sandbox.StateRunning {
		t.Fatalf("after an expiry pass racing a timeout moved to 10 h: %v %v, want running", cur.State, err)
	}
	e.m.Expire(ctx, time.Now().Add(11*time.Hour))
	cur, _ = e.st.Get(ctx, sb.ID)
	if cur.State != sandbox.StateStopped || cur.StopReason != sandbox.StopTimeout {
		t.Fatalf("after its deadline: %s (%q)", cur.State, cur.StopReason)
	}
	if got := e.w.leftovers(sb.ID); !slices.Equal(got, []string{"drive"}) {
		t.Errorf("expired sandbox holds %v", got)
	}
}

// TestCheckNamesOOMRecordedMeanwhile: the OOM watch runs without the sandbox's lock, so it
// can record a kill after Check read the record and before Check compares the counter;
// Check still names the OOM killer as the reason (it said "init exited" before: CI, 1 in
// ~50 runs of TestOOMKillRecorded).
func TestCheckNamesOOMRecordedMeanwhile(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	sb, err := e.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.w.mu.Lock()
	e.w.oom[sb.ID], e.w.alive[sb.ID] = 1, false // the OOM killer ended its init
	e.w.mu.Unlock()
	e.onGet = func() { e.m.WatchOOM(ctx) } // the watch records it right after Check's read
	cur, err := e.m.Check(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.State != sandbox.StateStopped || !strings.Contains(cur.Error, "OOM killer") || cur.OOMKills != 1 {
		t.Errorf("after Check: %s, %q, %d OOM kills; want stopped by the OOM killer, 1 kill", cur.State, cur.Error, cur.OOMKills)
	}
}

// TestStopEndsOpenStreams: a sandbox that stops ends the envd streams open to it at once,
// as a host kernel resetting them would (gVisor's own network stack does not: a stream to
// a sandbox whose kernel died would wait for TCP's timeouts).
func TestStopEndsOpenStreams(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	sb, err := e.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+sb.ID+"/stream", nil)
	resp, err := e.m.EnvdTransport().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	if _, err := e.m.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream to the stopped sandbox is still open after 10 s")
	}
}

// TestMappedSandboxRefusedWithoutUserNS: a sandbox made in a user namespace of its own (its
// record says Mapped) is not started by a runtime that cannot give it one (runsc 2022-12
// after a current runsc): the start fails as unavailable, naming why, and nothing of the
// sandbox runs as host root; one made by that runtime records it unmapped.
func TestMappedSandboxRefusedWithoutUserNS(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	sb, err := e.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Mapped == nil || !*sb.Mapped || !sb.InUserNS() {
		t.Fatalf("created under a runtime with user namespaces: mapped %v", sb.Mapped)
	}
	if _, err := e.m.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.m.CloseLogs()
	e.m.Close()
	e.hostRoot = true
	m2 := e.manager()
	if _, err := m2.Start(ctx, sb.ID); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "user namespace") {
		t.Fatalf("start under a runtime without user namespaces: %v, want unavailable naming the user namespace", err)
	}
	if got := e.w.leftovers(sb.ID); slices.Contains(got, "container") {
		t.Errorf("a container runs after the refused start: %v", got)
	}
	other, err := m2.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Mapped == nil || *other.Mapped || other.InUserNS() {
		t.Errorf("created under a runtime without user namespaces: mapped %v", other.Mapped)
	}
}
