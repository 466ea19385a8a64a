package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/moatdev/moat/internal/daemon"
)

// serveInstall is `moat serve --install`: it writes a systemd unit that runs this moat
// binary as the daemon, so that commands find a daemon at boot instead of each `moat
// run` starting its own.
type serveInstall struct {
	install    bool
	socketUnit bool
	root       string
	unit       string
	// socket is the daemon's socket (app.socketPath), for the socket unit.
	socket func() string
}

func (s *serveInstall) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&s.install, "install", false, "start nothing: write a systemd unit (/etc/systemd/system/moat.service) that runs this binary as the daemon with the other serve flags given here, and say how to enable it")
	cmd.Flags().StringVar(&s.root, "root", "/", "with --install: write the unit under `DIR`/etc/systemd/system/ (packaging, tests)")
	cmd.Flags().BoolVar(&s.socketUnit, "socket-unit", false, "with --install: also write a socket unit, so systemd holds the API socket and starts the daemon at the first connection")
	cmd.Flags().StringVar(&s.unit, "unit", "moat", "with --install: the unit's `NAME`")
}

// run writes the unit. It never calls systemctl: what to run next is printed.
func (s *serveInstall) run(cmd *cobra.Command) error {
	if s.unit == "" || strings.ContainsAny(s.unit, "/ \t\n") || strings.HasPrefix(s.unit, ".") {
		return fmt.Errorf("--unit %q: want a plain unit name such as moat", s.unit)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this moat binary: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return fmt.Errorf("finding this moat binary: %w", err)
	}
	if init := filepath.Join(filepath.Dir(exe), "moat-init"); !fileExists(init) {
		if _, err := daemon.FindInit(); err != nil {
			return fmt.Errorf("the unit would run %s, but %w", exe, err)
		}
	}
	argv := append([]string{exe, "serve"}, serveArgs(cmd)...)
	dir := filepath.Join(s.root, "etc", "systemd", "system")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, s.unit+".service")
	if s.socketUnit {
		sock, err := filepath.Abs(s.socket())
		if err != nil {
			return err
		}
		if strings.ContainsFunc(sock, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return fmt.Errorf("--socket-unit: the socket path %q holds spaces or control characters, which a socket unit cannot name", sock)
		}
		if err := writeUnit(dir, s.unit+".socket", socketUnit(sock, s.unit)); err != nil {
			return err
		}
		fmt.Fprintf(os.Stdout, "wrote %s\n", filepath.Join(dir, s.unit+".socket"))
	}
	if err := writeUnit(dir, s.unit+".service", serviceUnit(argv)); err != nil {
		return err
	}
	if s.socketUnit {
		fmt.Fprintf(os.Stdout, "wrote %s\nlet systemd start the daemon at the first connection with:\n  systemctl daemon-reload && systemctl enable --now %s.socket\n(and `systemctl enable %s` to start it at boot as well)\n", path, s.unit, s.unit)
		return nil
	}
	fmt.Fprintf(os.Stdout, "wrote %s\nstart it now and at every boot with:\n  systemctl daemon-reload && systemctl enable --now %s\n", path, s.unit)
	return nil
}

// writeUnit writes text to dir/name atomically (temp file, fsync, rename), mode 0644.
func writeUnit(dir, name, text string) error {
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// serveArgs are the flags of this `moat serve --install` invocation that the installed
// daemon must get: every flag given except the install flags, as --name=value. The data
// and run directories are always written out, so that a value taken from MOAT_DATA or
// MOAT_RUN_DIR is kept.
func serveArgs(cmd *cobra.Command) []string {
	var out []string
	skip := map[string]bool{"install": true, "socket-unit": true, "root": true, "unit": true, "help": true}
	add := func(f *pflag.Flag) {
		if skip[f.Name] {
			return
		}
		skip[f.Name] = true
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				out = append(out, "--"+f.Name+"="+v)
			}
			return
		}
		v := f.Value.String()
		if abs, err := filepath.Abs(v); err == nil && (f.Name == "data" || f.Name == "run-dir" || f.Name == "socket") {
			v = abs
		}
		out = append(out, "--"+f.Name+"="+v)
	}
	for _, name := range []string{"data", "run-dir"} {
		if f := cmd.Flags().Lookup(name); f != nil {
			add(f)
		}
	}
	if env := os.Getenv("MOAT_SOCKET"); env != "" && !cmd.Flags().Changed("socket") {
		out = append(out, "--socket="+env)
	}
	cmd.Flags().Visit(add)
	return out
}

// serviceUnit is the text of the systemd service running argv.
func serviceUnit(argv []string) string {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = systemdQuote(a)
	}
	return `# Written by ` + "`moat serve --install`" + `.
[Unit]
Description=moat: sandboxes for coding agents
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=` + strings.Join(quoted, " ") + `
Restart=on-failure
# Sandboxes outlive a daemon restart (the next daemon adopts them): stop only the daemon.
KillMode=process
# The egress proxy's connection budget follows the open-file limit.
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
`
}

// socketUnit is the text of the systemd socket unit holding the API socket at path for
// service unit (which `moat serve` then takes from LISTEN_FDS: activation.go).
func socketUnit(path, unit string) string {
	return `# Written by ` + "`moat serve --install --socket-unit`" + `.
[Unit]
Description=moat: the API socket (starts ` + unit + `.service at the first connection)

[Socket]
ListenStream=` + systemdPath(path) + `
SocketMode=0600
DirectoryMode=0711
Service=` + unit + `.service

[Install]
WantedBy=sockets.target
`
}

// systemdPath escapes a path for a unit setting that takes one path (no quoting there):
// specifiers doubled; a path with whitespace or control characters cannot be given.
func systemdPath(p string) string {
	return strings.ReplaceAll(p, "%", "%%")
}

// systemdQuote quotes one word of an ExecStart line: words of plain characters stay as
// they are; others are double-quoted with backslash, double quote and control characters
// escaped. Specifiers (%) and variables ($) are doubled either way, so systemd passes the
// word through unchanged.
func systemdQuote(s string) string {
	s = strings.NewReplacer("%", "%%", "$", "$$").Replace(s)
	plain := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@+%$", r)) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '\\' || r == '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
