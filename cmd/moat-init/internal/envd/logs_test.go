package envd

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/moatdev/moat/api/envd/process"
	v1 "github.com/moatdev/moat/api/v1"
)

func out(s string) *pb.ProcessEvent_DataEvent {
	return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: []byte(s)}}
}

func errOut(s string) *pb.ProcessEvent_DataEvent {
	return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: []byte(s)}}
}

// TestProcLogBounded: a process's log keeps its last max bytes, in order and by stream, and
// reads from an offset see what was dropped since.
func TestProcLogBounded(t *testing.T) {
	l := newProcLog(7, "t", "sh", nil, 10)
	l.write(out("abcd"))
	l.write(errOut("EF"))
	chunks, next, ended, _ := l.since(0)
	if len(chunks) != 2 || string(chunks[0].data) != "abcd" || chunks[1].stream != "stderr" || next != 6 || ended {
		t.Fatalf("before trimming: %+v next=%d", chunks, next)
	}
	l.write(out("ghijkl")) // 12 bytes: the first 2 go
	chunks, next, _, _ = l.since(0)
	var got strings.Builder
	for _, c := range chunks {
		got.Write(c.data)
	}
	if got.String() != "cdEFghijkl" || chunks[0].off != 2 || next != 12 {
		t.Errorf("after trimming: %q, first offset %d, next %d", got.String(), chunks[0].off, next)
	}
	l.write(out("0123456789XY")) // one write larger than the log: its tail stays
	chunks, next, _, _ = l.since(5)
	if len(chunks) != 1 || string(chunks[0].data) != "23456789XY" || chunks[0].off != 14 || next != 24 {
		t.Errorf("an oversized write: %+v next=%d", chunks, next)
	}
	chunks, _, _, _ = l.since(20)
	if len(chunks) != 1 || string(chunks[0].data) != "89XY" {
		t.Errorf("since the middle of a chunk: %+v", chunks)
	}
	if info := l.info(); info.Bytes != 24 || info.Dropped != 14 || !info.Running {
		t.Errorf("info: %+v", info)
	}
	l.finish(&pb.ProcessEvent_EndEvent{ExitCode: 2, Status: "exit status 2"})
	if _, _, ended, _ := l.since(24); !ended {
		t.Error("not ended after finish")
	}
	var nilLog *procLog
	nilLog.write(out("x")) // a process not logged
	nilLog.finish(nil)
}

// TestLogRegistryEvicts: a full registry drops its oldest ended log for a new one, and logs
// nothing new while every kept process runs.
func TestLogRegistryEvicts(t *testing.T) {
	r := &logRegistry{max: 2, size: 16}
	p := func(pid uint32) *proc { return &proc{pid: pid, config: &pb.ProcessConfig{Cmd: "sh"}} }
	a, b := r.add(p(1)), r.add(p(2))
	if r.add(p(3)) != nil {
		t.Fatal("logged a third process while two run")
	}
	b.finish(&pb.ProcessEvent_EndEvent{})
	if r.add(p(3)) == nil || r.find(2, "") != nil || r.find(1, "") != a || r.find(3, "") == nil {
		t.Errorf("eviction of the ended log: %+v", r.list())
	}
}

// TestServeLogs: GET /moat/logs lists the logs; ?pid= gives a process's chunks, a Dropped
// line where output is gone, and the End line once it ended.
func TestServeLogs(t *testing.T) {
	s := &Server{logs: &logRegistry{max: 4, size: 8}}
	tag := "web"
	l := s.logs.add(&proc{pid: 42, tag: &tag, config: &pb.ProcessConfig{Cmd: "srv", Args: []string{"-p", "80"}}})
	l.write(out("0123456789"))
	l.write(errOut("ab"))
	get := func(q string) (int, string) {
		rec := httptest.NewRecorder()
		s.serveLogs(rec, httptest.NewRequest(http.MethodGet, "/moat/logs"+q, nil))
		return rec.Code, rec.Body.String()
	}
	code, body := get("")
	var list []v1.ProcessLog
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list) != 1 || list[0].PID != 42 || list[0].Tag != "web" || list[0].Bytes != 12 || list[0].Dropped != 4 {
		t.Fatalf("list: %d %s", code, body)
	}
	l.finish(&pb.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"})
	for _, q := range []string{"?pid=42", "?tag=web"} {
		code, body = get(q)
		dec := json.NewDecoder(strings.NewReader(body))
		var lines []v1.LogChunk
		for dec.More() {
			var c v1.LogChunk
			if err := dec.Decode(&c); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, c)
		}
		if code != 200 || len(lines) != 4 || lines[0].Dropped != 4 || !bytes.Equal(lines[1].Data, []byte("456789")) ||
			lines[2].Stream != "stderr" || lines[3].End == nil || lines[3].End.ExitCode == nil || *lines[3].End.ExitCode != 0 {
			t.Errorf("logs %s: %d %s", q, code, body)
		}
	}
	for _, q := range []string{"?pid=7", "?tag=nope"} {
		if code, _ := get(q); code != 404 {
			t.Errorf("logs %s: %d, want 404", q, code)
		}
	}
	if code, _ := get("?pid=x"); code != 400 {
		t.Errorf("a bad pid: %d", code)
	}
}
