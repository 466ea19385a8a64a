package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/moatdev/moat/sdk"
)

// Remote use: with --host URL (or MOAT_HOST) and the API key in MOAT_API_KEY, every
// command that talks to a daemon drives the one listening there (its `moat serve
// --listen`) instead of the local socket. The key is read from the environment only, never
// from the command line, where other users of the host could read it. What the daemon keeps
// for its unix socket (API keys, secrets, drive archives, template administration, a host
// directory as --repo) answers 403 over TCP; `moat run` never starts a daemon of its own then.

// hostURL is the remote daemon's URL (--host, else MOAT_HOST), or "" for the local socket.
func (a *app) hostURL() string {
	if a.host != "" {
		return a.host
	}
	return os.Getenv("MOAT_HOST")
}

// checkHostURL accepts http and https URLs with a host and nothing after the path's
// root; the error says what is wrong. Pure.
func checkHostURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--host / MOAT_HOST %q: want http://HOST:PORT or https://HOST:PORT (the daemon's --listen): %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("--host / MOAT_HOST %q: want http://HOST:PORT or https://HOST:PORT (the daemon's --listen)", raw)
	}
	if u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--host / MOAT_HOST %q: want only a scheme, host and port, e.g. http://10.0.0.5:7070", raw)
	}
	return u.Scheme + "://" + u.Host, nil
}

// reachRemote pings the daemon at host with the key from MOAT_API_KEY.
func (a *app) reachRemote(ctx context.Context, host string) (*sdk.Client, error) {
	base, err := checkHostURL(host)
	if err != nil {
		return nil, err
	}
	key := os.Getenv("MOAT_API_KEY")
	if key == "" {
		return nil, fmt.Errorf("%s is a remote daemon: give an API key in MOAT_API_KEY (made on its host with `moat apikey create`)", base)
	}
	if a.daemonOnlyFlagsSet() {
		return nil, fmt.Errorf("--egress-hosts, --egress-dns, --egress-ca, --git-protected, --default-disk and --tiers configure a daemon: give them to the `moat serve` at %s", base)
	}
	c := sdk.NewHTTP(base, key)
	switch err := c.Ping(ctx); {
	case err == nil:
		a.client = c
		return c, nil
	case errors.Is(err, sdk.ErrUnauthenticated):
		return nil, fmt.Errorf("the daemon at %s refused the API key in MOAT_API_KEY: %w", base, err)
	case errors.Is(err, sdk.ErrNoDaemon):
		return nil, fmt.Errorf("no moat daemon answers at %s (is its `moat serve --listen` running and reachable?): %w", base, err)
	default:
		return nil, fmt.Errorf("daemon at %s: %w", base, err)
	}
}
