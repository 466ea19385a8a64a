package daemon

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// unixListener is the listener of the API's unix socket: Config.SocketListener when the
// daemon was given one (socket activation), else a new socket at Config.Socket, mode
// 0600, made after clearStaleSocket (never over a live daemon's socket); its identity is
// kept so that shutdown removes it only while it is still this daemon's.
func (d *Daemon) unixListener() (net.Listener, error) {
	if d.cfg.SocketListener != nil {
		return d.cfg.SocketListener, nil
	}
	if err := os.MkdirAll(filepath.Dir(d.cfg.Socket), 0o700); err != nil {
		return nil, err
	}
	if err := clearStaleSocket(d.cfg.Socket); err != nil {
		return nil, err
	}
	old := unix.Umask(0o177)
	ul, err := net.Listen("unix", d.cfg.Socket)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", d.cfg.Socket, err)
	}
	d.sockIno = inode(d.cfg.Socket)
	if err := os.Chmod(d.cfg.Socket, 0o600); err != nil {
		ul.Close()
		return nil, err
	}
	return ul, nil
}
