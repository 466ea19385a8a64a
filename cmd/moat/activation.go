package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

// activatedSocket returns the unix listener systemd passed this process (socket
// activation: LISTEN_PID is this process, LISTEN_FDS is 1, the socket is fd 3), or nil
// when none was passed. The variables are cleared so that nothing started from here
// takes them for its own. Anything but one unix stream socket is an error.
func activatedSocket() (net.Listener, error) {
	pid, fds := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS")
	if pid == "" || fds == "" || pid != strconv.Itoa(os.Getpid()) {
		return nil, nil
	}
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(k)
	}
	if fds != "1" {
		return nil, fmt.Errorf("socket activation passed %q sockets: the unit must listen on the API's unix socket alone", fds)
	}
	f := os.NewFile(3, "systemd socket")
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("socket activation: fd 3: %w", err)
	}
	if _, ok := l.(*net.UnixListener); !ok {
		l.Close()
		return nil, fmt.Errorf("socket activation: fd 3 is a %s listener, not the unix socket", l.Addr().Network())
	}
	return l, nil
}
