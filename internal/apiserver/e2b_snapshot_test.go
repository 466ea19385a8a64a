package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func snap(id, name, sb string, age time.Duration) *sandbox.Snapshot {
	return &sandbox.Snapshot{ID: id, Name: name, Sandbox: sb, CreatedAt: t0.Add(-age)}
}

// e2bResolve: snapshot ID, then the E2B mapping, then a moat template, then the newest
// snapshot of that name; nothing else.
func TestE2BResolve(t *testing.T) {
	aliases := map[string]string{"base": "debian", "py": "python"}
	templates := []string{"host", "debian", "tools"}
	snaps := []*sandbox.Snapshot{
		snap("snap-aaaa", "work", "sb-1", 3*time.Hour),
		snap("snap-bbbb", "work", "sb-1", time.Hour), // the newest "work"
		snap("snap-cccc", "work", "sb-2", 2*time.Hour),
		snap("snap-dddd", "base", "sb-1", 0),  // a name a template mapping has
		snap("snap-eeee", "tools", "sb-1", 0), // a moat template's name
		snap("host", "", "sb-1", 0),           // (an ID equal to a template name wins)
	}
	for _, tc := range []struct {
		name     string
		template string
		aliased  bool
		snapshot string
		ok       bool
	}{
		{"snap-aaaa", "", false, "snap-aaaa", true},
		{"host", "", false, "host", true},
		{"base", "debian", true, "", true},
		{"py", "python", true, "", true}, // mapped though not built: the caller says so
		{"tools", "tools", false, "", true},
		{"debian", "debian", false, "", true},
		{"work", "", false, "snap-bbbb", true},
		{"nothing", "", false, "", false},
		{"", "", false, "", false},
	} {
		src, ok := e2bResolve(tc.name, aliases, templates, snaps)
		got := ""
		if src.Snapshot != nil {
			got = src.Snapshot.ID
		}
		if ok != tc.ok || src.Template != tc.template || src.Aliased != tc.aliased || got != tc.snapshot {
			t.Errorf("e2bResolve(%q) = {%q aliased %v snapshot %q} %v, want {%q %v %q} %v",
				tc.name, src.Template, src.Aliased, got, ok, tc.template, tc.aliased, tc.snapshot, tc.ok)
		}
	}
	// Another caller's snapshots are not passed in: the same names resolve to nothing.
	if _, ok := e2bResolve("work", aliases, templates, nil); ok {
		t.Error("a snapshot name resolved without that caller's snapshots")
	}
}

func TestE2BSnapshotName(t *testing.T) {
	aliases := map[string]string{"base": "debian"}
	templates := []string{"host", "debian"}
	for _, tc := range []struct {
		name string
		want error
	}{
		{"", nil},
		{"my-work", nil},
		{"base", errdefs.ErrConflict},
		{"host", errdefs.ErrConflict},
		{"debian", errdefs.ErrConflict},
		{"snap-0123", errdefs.ErrInvalidArgument},
	} {
		err := e2bSnapshotName(tc.name, aliases, templates)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("e2bSnapshotName(%q) = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func query(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

func TestParseSnapshotQuery(t *testing.T) {
	tok := listToken(t0, "snap-x")
	for _, tc := range []struct {
		q    func(string) string
		want snapshotQuery
		err  bool
	}{
		{query(), snapshotQuery{Limit: 100}, false},
		{query("sandboxID", "sb-1", "limit", "5"), snapshotQuery{Sandbox: "sb-1", Limit: 5}, false},
		{query("name", "work", "nextToken", tok), snapshotQuery{Name: "work", Limit: 100, After: &listPos{t0, "snap-x"}}, false},
		{query("sandboxID", "sb-1", "name", "work"), snapshotQuery{}, true},
		{query("limit", "0"), snapshotQuery{}, true},
		{query("limit", "101"), snapshotQuery{}, true},
		{query("limit", "x"), snapshotQuery{}, true},
		{query("nextToken", "bm90LWEtdG9rZW4"), snapshotQuery{}, true},
	} {
		got, err := parseSnapshotQuery(tc.q)
		if tc.err {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("parseSnapshotQuery: %v, want invalid argument", err)
			}
			continue
		}
		if err != nil || got.Sandbox != tc.want.Sandbox || got.Name != tc.want.Name || got.Limit != tc.want.Limit ||
			(got.After == nil) != (tc.want.After == nil) || got.After != nil && (!got.After.At.Equal(tc.want.After.At) || got.After.ID != tc.want.After.ID) {
			t.Errorf("parseSnapshotQuery = %+v, %v; want %+v", got, err, tc.want)
		}
	}
}

func ids(page []*sandbox.Snapshot) []string {
	out := []string{}
	for _, sn := range page {
		out = append(out, sn.ID)
	}
	return out
}

// pageSnapshots: newest first, filters, pages of limit with a token that survives
// deletions before it; ties in time ordered by ID.
func TestPageSnapshots(t *testing.T) {
	all := []*sandbox.Snapshot{
		snap("snap-1", "a", "sb-1", 5*time.Minute),
		snap("snap-2", "b", "sb-1", 4*time.Minute),
		snap("snap-3", "a", "sb-2", 3*time.Minute),
		snap("snap-4", "", "sb-1", 2*time.Minute),
		snap("snap-5", "", "sb-1", 2*time.Minute), // same time as snap-4
		snap("snap-6", "c", "sb-1", time.Minute),
	}
	page, next := pageSnapshots(all, snapshotQuery{Limit: 100})
	if got := ids(page); !slices.Equal(got, []string{"snap-6", "snap-5", "snap-4", "snap-3", "snap-2", "snap-1"}) || next != "" {
		t.Errorf("all: %v next %q", got, next)
	}
	page, _ = pageSnapshots(all, snapshotQuery{Sandbox: "sb-2", Limit: 100})
	if got := ids(page); !slices.Equal(got, []string{"snap-3"}) {
		t.Errorf("sandbox filter: %v", got)
	}
	page, _ = pageSnapshots(all, snapshotQuery{Name: "a", Limit: 100})
	if got := ids(page); !slices.Equal(got, []string{"snap-3", "snap-1"}) {
		t.Errorf("name filter: %v", got)
	}
	page, _ = pageSnapshots(all, snapshotQuery{Name: "snap-4", Limit: 100})
	if got := ids(page); !slices.Equal(got, []string{"snap-4"}) {
		t.Errorf("name filter by ID: %v", got)
	}
	page, _ = pageSnapshots(all, snapshotQuery{Name: "none", Limit: 100})
	if page == nil || len(page) != 0 {
		t.Errorf("unknown name: %v, want an empty list (not nil: JSON [])", page)
	}

	// Pages of 2 walk the whole list once, in order.
	var walked []string
	q := snapshotQuery{Sandbox: "sb-1", Limit: 2}
	for n := 0; ; n++ {
		page, next := pageSnapshots(all, q)
		walked = append(walked, ids(page)...)
		if next == "" {
			break
		}
		if n > 5 {
			t.Fatal("paging does not end")
		}
		at, id, err := parseListToken(next)
		if err != nil {
			t.Fatal(err)
		}
		q.After = &listPos{at, id}
	}
	if !slices.Equal(walked, []string{"snap-6", "snap-5", "snap-4", "snap-2", "snap-1"}) {
		t.Errorf("pages: %v", walked)
	}

	// The token of page one still leads to page two when page one's items are deleted.
	page1, next := pageSnapshots(all, snapshotQuery{Limit: 2})
	at, id, _ := parseListToken(next)
	rest := slices.DeleteFunc(slices.Clone(all), func(sn *sandbox.Snapshot) bool { return slices.Contains(page1, sn) })
	page2, _ := pageSnapshots(rest, snapshotQuery{Limit: 2, After: &listPos{at, id}})
	if got := ids(page2); !slices.Equal(got, []string{"snap-4", "snap-3"}) {
		t.Errorf("page two after page one's deletion: %v", got)
	}
}

func TestE2BForkParams(t *testing.T) {
	n := func(v int) *int { return &v }
	s := func(v int64) *int64 { return &v }
	def := 300 * time.Second
	for _, tc := range []struct {
		req   e2bForkRequest
		count int
		d     time.Duration
		err   bool
	}{
		{e2bForkRequest{}, 1, def, false},
		{e2bForkRequest{Count: n(3), Timeout: s(60)}, 3, time.Minute, false},
		{e2bForkRequest{Count: n(sandbox.MaxFork)}, sandbox.MaxFork, def, false},
		{e2bForkRequest{Count: n(0)}, 0, 0, true},
		{e2bForkRequest{Count: n(-1)}, 0, 0, true},
		{e2bForkRequest{Count: n(sandbox.MaxFork + 1)}, 0, 0, true},
		{e2bForkRequest{Timeout: s(0)}, 0, 0, true},
		{e2bForkRequest{Timeout: s(-5)}, 0, 0, true},
	} {
		count, d, err := e2bForkParams(tc.req, def)
		if tc.err != (err != nil) || !tc.err && (count != tc.count || d != tc.d) {
			t.Errorf("e2bForkParams(%+v) = %d, %s, %v", tc.req, count, d, err)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("e2bForkParams: %v is not invalid argument", err)
		}
	}
}

// FuzzParseListToken: a token from the client is read without panic, refused as an
// invalid argument or accepted with a non-empty ID; what it accepts, made again by
// listToken, reads back as the same position (listToken and parseListToken agree).
func FuzzParseListToken(f *testing.F) {
	f.Add(listToken(t0, "snap-0123456789abcdef0123"))
	f.Add(listToken(t0.Add(123456789), "sb-1 2"))
	f.Add("")
	f.Add("bm90LWEtdG9rZW4")
	f.Add("MjAyNi0xMi0wMVQxMjowMDowMFog")
	f.Add("!!!")
	f.Fuzz(func(t *testing.T, tok string) {
		at, id, err := parseListToken(tok)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not invalid argument", err)
			}
			return
		}
		if id == "" {
			t.Fatalf("token %q accepted with an empty ID", tok)
		}
		again := listToken(at, id)
		at2, id2, err := parseListToken(again)
		if err != nil || !at2.Equal(at) || id2 != id {
			t.Fatalf("round trip of %q: %v %q %v", tok, at2, id2, err)
		}
	})
}

// fixedTemplates lists names and builds nothing.
type fixedTemplates struct{ buildingTemplates }

func (f *fixedTemplates) List(context.Context) ([]v1.Template, error) {
	return []v1.Template{{Name: "host"}, {Name: "debian"}}, nil
}

// countingSnaps is a Snapshots of one caller's records that counts the reads.
type countingSnaps struct {
	Snapshots
	list  []*sandbox.Snapshot
	lists int
	gets  int
}

func (c *countingSnaps) ListSnapshots(context.Context) ([]*sandbox.Snapshot, error) {
	c.lists++
	var out []*sandbox.Snapshot
	for _, sn := range c.list {
		if !sn.Fork { // as the manager's: a fork's transient snapshot is never listed
			out = append(out, sn)
		}
	}
	return out, nil
}

func (c *countingSnaps) GetSnapshot(_ context.Context, id string) (*sandbox.Snapshot, error) {
	c.gets++
	for _, sn := range c.list {
		if sn.ID == id {
			return sn, nil
		}
	}
	return nil, fmt.Errorf("snapshot %s: %w", id, errdefs.ErrNotFound)
}

// e2bSource reads snapshot records only when the name may be a snapshot: none for a
// template name (the warm-pool create stays free of snapshot I/O), one record for an ID,
// the list only when no template has the name.
func TestE2BSourceReads(t *testing.T) {
	snaps := &countingSnaps{list: []*sandbox.Snapshot{snap("snap-0123", "work", "sb-1", 0), snap("snap-fork", "", "sb-1", 0)}}
	snaps.list[1].Fork = true
	s := &Server{templates: &fixedTemplates{}, snaps: snaps, e2b: E2BConfig{Templates: map[string]string{"base": "debian"}}}
	ctx := context.Background()
	for _, tc := range []struct {
		name              string
		template, snap    string
		notFound          bool
		wantGets, wantLst int
	}{
		{"base", "debian", "", false, 0, 0},
		{"host", "host", "", false, 0, 0},
		{"snap-0123", "", "snap-0123", false, 1, 0},
		{"work", "", "snap-0123", false, 0, 1},
		{"snap-fork", "", "", true, 1, 1}, // a fork's transient snapshot is never a source
		{"nothing", "", "", true, 0, 1},
	} {
		snaps.gets, snaps.lists = 0, 0
		src, err := s.e2bSource(ctx, tc.name)
		got := ""
		if src.Snapshot != nil {
			got = src.Snapshot.ID
		}
		if tc.notFound != errors.Is(err, errdefs.ErrNotFound) || src.Template != tc.template || got != tc.snap {
			t.Errorf("e2bSource(%q) = {%q %q} %v", tc.name, src.Template, got, err)
		}
		if snaps.gets != tc.wantGets || snaps.lists != tc.wantLst {
			t.Errorf("e2bSource(%q) read %d records and %d lists, want %d and %d", tc.name, snaps.gets, snaps.lists, tc.wantGets, tc.wantLst)
		}
	}
}
