package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/internal/testutil"
)

func TestReadSecretValue(t *testing.T) {
	max := strings.Repeat("v", secrets.MaxValueBytes)
	for _, tc := range []struct {
		in, want, err string
	}{
		{"ghp_token", "ghp_token", ""},
		{"ghp_token\n", "ghp_token", ""},
		{"ghp_token\r\n", "ghp_token", ""},
		{"ghp_token\n\n", "ghp_token\n", ""}, // one newline only
		{"two\nlines\n", "two\nlines", ""},
		{" spaced \t\n", " spaced \t", ""},
		{"\x00\xff", "\x00\xff", ""},
		{"\n\n", "\n", ""},
		{max, max, ""},
		{max + "\n", max, ""},
		{max + "\r\n", max, ""},
		{"", "", "empty"},
		{"\n", "", "empty"},
		{"\r\n", "", "empty"},
		{max + "v", "", "larger than"},
		{max + "v\n", "", "larger than"},
		{max + max, "", "larger than"},
	} {
		got, err := readSecretValue(strings.NewReader(tc.in))
		short := tc.in
		if len(short) > 20 {
			short = short[:20] + "..."
		}
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %q, %v; want %q", short, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %q, %v; want an error with %q", short, got, err, tc.err)
		case err != nil && len(tc.in) > 2 && strings.Contains(err.Error(), tc.in[:3]):
			t.Errorf("%q: the error repeats the value: %v", short, err)
		}
	}
}

// TestReadSecretFromPipe: stdin that is not a terminal is read whole, without a prompt.
func TestReadSecretFromPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		w.WriteString("piped-value\n")
		w.Close()
	}()
	var prompt strings.Builder
	got, err := readSecret(context.Background(), "NAME", r, &prompt)
	if err != nil || got != "piped-value" || prompt.Len() != 0 {
		t.Fatalf("%q, %v; prompt %q", got, err, prompt.String())
	}
}

// TestSecretSetRefusesBeforeConnecting: a value on the command line and an invalid name
// are refused before the daemon is reached (no daemon runs at the socket given).
func TestSecretSetRefusesBeforeConnecting(t *testing.T) {
	for _, args := range [][]string{
		{"set", "GITHUB_TOKEN", "ghp_in_argv"},
		{"set"},
		{"set", "ghp_in_argv"},
		{"set", "NAME=x"},
		{"rm"},
		{"ls", "extra"},
		{"set", "A", "--methods", "GET"},
		{"scope", "A"},
		{"scope", "a-bad", "--hosts", "api.test"},
		{"scope", "A", "--path-prefix", "/v1/"},
	} {
		a := &app{socket: filepath.Join(t.TempDir(), "none.sock")}
		cmd := a.secretCmd()
		cmd.SetArgs(args)
		cmd.SetOut(new(strings.Builder))
		cmd.SetErr(new(strings.Builder))
		err := cmd.Execute()
		if err == nil || strings.Contains(err.Error(), "daemon") {
			t.Errorf("secret %q: %v", args, err)
		}
		if err != nil && strings.Contains(err.Error(), "ghp_in_argv") {
			t.Errorf("secret %q: the error repeats the argument: %v", args, err)
		}
		if a.client != nil || a.cleanup != nil {
			t.Fatalf("secret %q connected", args)
		}
	}
}

// openTerminal returns a pseudo-terminal: the terminal side for readSecret, the master
// side to type on and to read what the terminal shows.
func openTerminal(t *testing.T) (tty, master *os.File) {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close(); tty.Close() })
	return tty, master
}

func echoOn(t *testing.T, tty *os.File) bool {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return tio.Lflag&unix.ECHO != 0
}

// TestReadSecretFromTerminal: at a terminal, set prompts on stderr and reads the value
// without echo; afterwards the terminal echoes again.
func TestReadSecretFromTerminal(t *testing.T) {
	tty, master := openTerminal(t)
	if !echoOn(t, tty) {
		t.Fatal("a new terminal does not echo")
	}
	shown := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(master) // ends with EIO when the terminal side closes
		shown <- string(b)
	}()
	var prompt strings.Builder
	type result struct {
		v   string
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := readSecret(context.Background(), "GITHUB_TOKEN", tty, &prompt)
		done <- result{v, err}
	}()
	// Type only once echo is off, as a person would after the prompt.
	testutil.WaitFor(t, 5*time.Second, "echo off", func() bool { return !echoOn(t, tty) })
	if _, err := master.WriteString("typed-secret\n"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.v != "typed-secret" {
		t.Fatalf("%q, %v", r.v, r.err)
	}
	if !strings.Contains(prompt.String(), "Value for GITHUB_TOKEN") {
		t.Fatalf("prompt %q", prompt.String())
	}
	if !echoOn(t, tty) {
		t.Fatal("echo not restored")
	}
	tty.Close()
	select {
	case out := <-shown:
		if strings.Contains(out, "typed-secret") {
			t.Fatalf("the terminal showed the value: %q", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading the terminal's output")
	}
}

// TestReadSecretInterrupted: an interrupt at the prompt returns at once and restores echo.
func TestReadSecretInterrupted(t *testing.T) {
	tty, _ := openTerminal(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := readSecret(ctx, "NAME", tty, io.Discard)
		done <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "echo off", func() bool { return !echoOn(t, tty) })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read did not return on interrupt")
	}
	if !echoOn(t, tty) {
		t.Fatal("echo not restored after an interrupt")
	}
}

// TestReadSecretEmptyAtTerminal: an empty line at the prompt is refused.
func TestReadSecretEmptyAtTerminal(t *testing.T) {
	tty, master := openTerminal(t)
	done := make(chan error, 1)
	go func() {
		_, err := readSecret(context.Background(), "NAME", tty, io.Discard)
		done <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "echo off", func() bool { return !echoOn(t, tty) })
	master.WriteString("\n")
	if err := <-done; err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty line: %v", err)
	}
}
