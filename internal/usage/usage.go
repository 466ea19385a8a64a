// Package usage is the arithmetic of moat's usage ledger (issue 16, metering): how one
// sample of a sandbox's counters turns into hourly deltas (Accrue), and how per-sandbox
// rows sum into groups (Group). Pure functions; the store keeps the marks and buckets,
// the sandbox manager reads the counters.
package usage

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// GiB is the unit of the GiB-hour figures.
const GiB = 1 << 30

// Mark is what the ledger last saw of a sandbox: its state since At, the CPU counter of
// its current cgroup (the counter starts again at 0 with each start), and the gauges that
// the time until the next reading is charged at.
type Mark struct {
	State      string
	At         time.Time
	CPUNs      uint64
	MemBytes   int64
	DriveBytes int64
}

// Reading is one observation: the state at At and, when the cgroup could be read, its CPU
// counter and memory working set. DriveBytes is the drive's allocated size (0: unchanged).
type Reading struct {
	At         time.Time
	State      string
	CPUNs      *uint64
	MemBytes   *int64
	DriveBytes int64
}

// Delta is what one reading adds to one hour's bucket (Hour: its start, UTC).
type Delta struct {
	Hour                           time.Time
	RunningNs, PausedNs, StoppedNs int64
	CPUNs                          uint64
	MemGiBHours, DriveGiBHours     float64
	SnapshotGiBHours               float64
}

// Zero reports whether d adds nothing.
func (d Delta) Zero() bool {
	return d.RunningNs == 0 && d.PausedNs == 0 && d.StoppedNs == 0 && d.CPUNs == 0 && d.MemGiBHours == 0 && d.DriveGiBHours == 0 && d.SnapshotGiBHours == 0
}

// Stored charges bytes of storage kept from from to to (a snapshot's image), split at hour
// boundaries; nothing when to is not after from.
func Stored(from, to time.Time, bytes int64) []Delta {
	var out []Delta
	for t := from; t.Before(to) && bytes > 0; {
		hour := t.UTC().Truncate(time.Hour)
		end := hour.Add(time.Hour)
		if end.After(to) {
			end = to
		}
		out = append(out, Delta{Hour: hour, SnapshotGiBHours: float64(bytes) / GiB * end.Sub(t).Hours()})
		t = end
	}
	return out
}

// live reports whether a state has a cgroup (processes that use CPU and memory).
func live(state string) bool { return state == "running" || state == "paused" }

// metered reports whether wall time and the drive are charged in a state: creating and
// deleting are the platform's.
func metered(state string) bool { return live(state) || state == "stopped" }

// Accrue charges the time from prev.At to r.At at prev's state and gauges (split at hour
// boundaries, so windows are exact to the hour), adds the CPU counter's growth since prev
// (a counter below prev's is a new cgroup: all of it is new), and returns the deltas and
// the new mark. A reading older than the mark charges no time. Leaving the live states
// resets the CPU counter and the memory gauge: the cgroup is gone, the next start makes a
// new one that counts from 0.
func Accrue(prev Mark, r Reading) ([]Delta, Mark) {
	var out []Delta
	if metered(prev.State) && !prev.At.IsZero() && r.At.After(prev.At) {
		for t := prev.At; t.Before(r.At); {
			hour := t.UTC().Truncate(time.Hour)
			end := hour.Add(time.Hour)
			if end.After(r.At) {
				end = r.At
			}
			ns := end.Sub(t)
			d := Delta{Hour: hour}
			switch prev.State {
			case "running":
				d.RunningNs = int64(ns)
			case "paused":
				d.PausedNs = int64(ns)
			case "stopped":
				d.StoppedNs = int64(ns)
			}
			h := ns.Hours()
			if live(prev.State) {
				d.MemGiBHours = float64(prev.MemBytes) / GiB * h
			}
			d.DriveGiBHours = float64(prev.DriveBytes) / GiB * h
			out = append(out, d)
			t = end
		}
	}
	next := prev
	if r.At.After(prev.At) || prev.At.IsZero() {
		next.At = r.At
	}
	if r.CPUNs != nil && live(prev.State) {
		var add uint64
		if *r.CPUNs >= prev.CPUNs {
			add = *r.CPUNs - prev.CPUNs
		} else {
			add = *r.CPUNs
		}
		if add > 0 {
			hour := next.At.UTC().Truncate(time.Hour)
			if n := len(out); n > 0 && out[n-1].Hour.Equal(hour) {
				out[n-1].CPUNs += add
			} else {
				out = append(out, Delta{Hour: hour, CPUNs: add})
			}
		}
		next.CPUNs = *r.CPUNs
	}
	if r.MemBytes != nil {
		next.MemBytes = *r.MemBytes
	}
	if r.DriveBytes > 0 {
		next.DriveBytes = r.DriveBytes
	}
	if r.State != "" {
		next.State = r.State
	}
	if !live(next.State) {
		next.CPUNs, next.MemBytes = 0, 0
	}
	out = slices.DeleteFunc(out, Delta.Zero)
	return out, next
}

// Bys are the groupings of `moat usage --by`.
var Bys = []string{"sandbox", "template", "api-key"}

// ParseBy checks a --by value ("" is sandbox).
func ParseBy(by string) (string, error) {
	if by == "" {
		return "sandbox", nil
	}
	if !slices.Contains(Bys, by) {
		return "", fmt.Errorf("unknown grouping %q (one of: sandbox, template, api-key)", by)
	}
	return by, nil
}

// Group sums per-sandbox rows (Key = sandbox id) by by: "sandbox" keeps them, "template"
// and "api-key" add up every figure of the rows with the same template or API key. Rows
// come out sorted by key.
func Group(rows []v1.UsageRow, by string) ([]v1.UsageRow, error) {
	by, err := ParseBy(by)
	if err != nil {
		return nil, err
	}
	if by == "sandbox" {
		out := slices.Clone(rows)
		slices.SortFunc(out, func(a, b v1.UsageRow) int { return compareKeys(a.Key, b.Key) })
		return out, nil
	}
	idx := map[string]int{}
	var out []v1.UsageRow
	for _, r := range rows {
		k := r.Template
		if by == "api-key" {
			k = r.APIKey
		}
		i, ok := idx[k]
		if !ok {
			g := v1.UsageRow{Key: k}
			if by == "template" {
				g.Template = k
			} else {
				g.APIKey = k
			}
			i = len(out)
			idx[k] = i
			out = append(out, g)
		}
		g := &out[i]
		g.Sandboxes += r.Sandboxes
		g.Creations += r.Creations
		g.RunningSeconds += r.RunningSeconds
		g.PausedSeconds += r.PausedSeconds
		g.StoppedSeconds += r.StoppedSeconds
		g.CPUSeconds += r.CPUSeconds
		g.MemoryGiBHours += r.MemoryGiBHours
		g.DriveGiBHours += r.DriveGiBHours
		g.SnapshotGiBHours += r.SnapshotGiBHours
		g.EgressBytesTotal += r.EgressBytesTotal
		for d, n := range r.EgressBytes {
			if g.EgressBytes == nil {
				g.EgressBytes = map[string]int64{}
			}
			g.EgressBytes[d] += n
		}
	}
	slices.SortFunc(out, func(a, b v1.UsageRow) int { return compareKeys(a.Key, b.Key) })
	return out, nil
}

func compareKeys(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ParseTime reads a --since/--until value: an RFC 3339 time, a date (YYYY-MM-DD, UTC), or
// a duration before now ("90m", "24h", "7d"). "" is the zero time (no bound).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if d, err := strconv.Atoi(n); err == nil && d >= 0 && d <= 100*366 {
			return now.Add(-time.Duration(d) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("bad time %q: want an RFC 3339 time (2026-12-01T00:00:00Z), a date (2026-12-01) or a duration before now (90m, 24h, 7d)", s)
}
