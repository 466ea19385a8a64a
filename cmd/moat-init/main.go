// Command moat-init is PID 1 of every moat sandbox. It reaps orphaned
// processes, forwards SIGTERM to everything in the sandbox, and serves the
// E2B envd protocol (process and filesystem services, file transfer) on
// port 49983 so that E2B SDKs can drive the sandbox.
//
// It refuses to start anywhere but as PID 1 of a sandbox (checkPlacement).
// The access token comes on stdin, which the daemon closes after writing it;
// the rest of the configuration comes from the environment: MOAT_ENV (JSON
// object of default process environment variables) and MOAT_DEFAULT_USER
// (default "user", falling back to root). The listen address is the -addr
// flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/moatdev/moat/cmd/moat-init/internal/envd"
	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// Shutdown timing: how long processes get between SIGTERM and SIGKILL.
const (
	termGrace = 5 * time.Second
	killGrace = time.Second
)

func main() {
	// moat-init idles most of its life: keep the heap small.
	debug.SetGCPercent(50)
	debug.SetMemoryLimit(24 << 20)

	addr := flag.String("addr", ":49983", "listen `address` of the envd protocol")
	logLevel := flag.String("log-level", "info", "log `level`: debug, info, warn or error")
	idle := flag.Duration("idle-trim", 5*time.Second, "trim resident memory after this long without requests (0: never)")
	flag.Parse()

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "moat-init: -log-level: %v\n", err)
		os.Exit(2)
	}
	if err := checkPlacement(linux.ReadPlacement()); err != nil {
		fmt.Fprintf(os.Stderr, "moat-init: %v\n", err)
		os.Exit(2)
	}
	// stdout and stderr lead to the daemon's log pipe, which has no reader while the
	// daemon restarts: a write then fails with EPIPE, which must not end PID 1 (Go exits
	// on EPIPE on fd 1 and 2 unless SIGPIPE is notified). Notified, not ignored: an
	// ignored signal would stay ignored in every process moat-init starts.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	log := slog.New(newLimitHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}), logRate, logBurst))
	if err := run(*addr, *idle, log); err != nil {
		log.Error("moat-init failed", "err", err)
		os.Exit(1)
	}
}

// run serves until SIGTERM or SIGINT, then stops every process and returns.
func run(addr string, idleTick time.Duration, log *slog.Logger) error {
	token, err := readToken(os.Stdin)
	if err != nil {
		return err
	}
	if err := linux.RedirectStdinToNull(); err != nil {
		return err
	}
	cfg, err := configFromEnv()
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	cfg.token = token
	if err := setOpenFileLimit(cfg.nofile); err != nil {
		log.Warn("setting RLIMIT_NOFILE", "err", err)
	}

	if err := writeResolvConf("/etc/resolv.conf"); err != nil {
		log.Warn("writing /etc/resolv.conf", "err", err)
	}
	if cfg.caPEM != "" {
		if err := installCA("/", cfg.caPEM); err != nil {
			log.Warn("installing the interception CA", "err", err)
		}
	}

	reaper := linux.NewReaper(log)
	if err := reaper.Start(); err != nil {
		return err
	}
	defer reaper.Stop()

	srv := envd.New(envd.Config{
		Token:       cfg.token,
		DefaultUser: cfg.defaultUser,
		Env:         cfg.env,
		Users:       users.NewDB("/etc/passwd", "/etc/group"),
		Reaper:      reaper,
		Log:         log,
		OOMKills:    oomCounter("/sys/fs/cgroup"),
	})

	trimmer := &idleTrimmer{log: log}
	stopTrim := make(chan struct{})
	defer close(stopTrim)
	if idleTick > 0 && !cfg.noTrim {
		go trimmer.run(idleTick, stopTrim)
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Handler:           trimmer.wrap(srv.Handler()),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		// No ReadTimeout or WriteTimeout: process and watch streams and
		// file transfers last as long as they need.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	ignoreSignals(log)
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	log.Info("moat-init serving", "addr", ln.Addr().String(), "pid", os.Getpid(),
		"default_user", cfg.defaultUser)
	// Startup work is done; hand back its pages.
	trimmer.trim()

	select {
	case err := <-serveErr:
		return fmt.Errorf("serving: %w", err)
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String())
	}
	_ = ln.Close()
	stopAll(reaper, log)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Debug("shutdown", "err", err)
	}
	return nil
}

// ignoreSignals keeps signals whose Go default is to exit (SIGHUP) or to
// dump and exit (SIGQUIT) from ending PID 1: the kernel delivers them to a
// namespace's init from inside only because the Go runtime handles them.
// They are consumed rather than set to SIG_IGN, which children would
// inherit across exec.
func ignoreSignals(log *slog.Logger) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for sig := range ch {
			log.Info("ignoring signal", "signal", sig.String())
		}
	}()
}

// stopAll sends SIGTERM to every process, waits up to termGrace for them
// to exit, then kills what is left.
func stopAll(r *linux.Reaper, log *slog.Logger) {
	r.SignalAll(syscall.SIGTERM)
	if waitChildren(termGrace) {
		return
	}
	log.Warn("processes still running after SIGTERM, killing them")
	r.SignalAll(syscall.SIGKILL)
	waitChildren(killGrace)
}

// waitChildren polls until no child is left or d passes.
func waitChildren(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for linux.HasChildren() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// resolvConf points the sandbox's resolver at its gateway. Every DNS query leaving the
// sandbox reaches moat's DNS server whatever address it names; this file only saves
// programs from trying an image's nameservers first.
const resolvConf = "# moat: the sandbox's DNS server (answers only names the egress policy allows)\nnameserver 198.18.0.1\noptions timeout:2 attempts:2\n"

// writeResolvConf replaces path (a file or a symlink, as images often ship) with
// resolvConf, atomically.
func writeResolvConf(path string) error {
	if b, err := os.ReadFile(path); err == nil && string(b) == resolvConf {
		return nil
	}
	tmp := path + ".moat-tmp"
	if err := os.WriteFile(tmp, []byte(resolvConf), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// Where installCA puts the sandbox's trust files; the daemon points SSL_CERT_FILE,
// REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE and GIT_SSL_CAINFO at the bundle and
// NODE_EXTRA_CA_CERTS at the CA alone.
const (
	caFile     = "etc/moat/ca.pem"
	caBundle   = "etc/moat/ca-bundle.pem"
	systemPEMs = "etc/ssl/certs/ca-certificates.crt"
)

// installCA writes the interception CA certificate and a bundle of the system's roots
// plus it under root (the sandbox's /).
func installCA(root, pem string) error {
	if err := os.MkdirAll(filepath.Join(root, "etc/moat"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, caFile), []byte(pem), 0o644); err != nil {
		return err
	}
	system, err := os.ReadFile(filepath.Join(root, systemPEMs))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(system) > 0 && system[len(system)-1] != '\n' {
		system = append(system, '\n')
	}
	return os.WriteFile(filepath.Join(root, caBundle), append(system, pem...), 0o644)
}

// maxOpenFiles is the RLIMIT_NOFILE every process in a sandbox gets (soft and hard), unless
// the sandbox's hard limit is lower. Runtimes set it from the spec (internal/runtime) when
// the daemon may; where it may not (no CAP_SYS_RESOURCE over the sandbox's user namespace,
// which root has only as its owner), the limit is inherited and moat-init sets it here.
const maxOpenFiles = 65536

// setOpenFileLimit sets this process' RLIMIT_NOFILE (soft and hard) to openFileLimit of its
// hard limit and want (the sandbox's nofile; 0: not given), so every process it starts
// inherits it (Setrlimit also stops Go from restoring the soft limit it started with in
// children). Lowering needs no privilege, and nothing in the sandbox can raise the hard
// limit again (that takes CAP_SYS_RESOURCE in the host's user namespace).
func setOpenFileLimit(want uint64) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	n := openFileLimit(rl.Max, want)
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
}

// openFileLimit is the soft and hard RLIMIT_NOFILE for a hard limit of hard and the
// sandbox's nofile want: want (maxOpenFiles when 0), never above what the process may have.
func openFileLimit(hard, want uint64) uint64 {
	if want == 0 {
		want = maxOpenFiles
	}
	return min(hard, want)
}
