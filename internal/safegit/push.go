package safegit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// fetchRemote names the remote FetchHTTP configures (in git's environment only).
const fetchRemote = "moat-remote"

// RemoteHEAD is where FetchHTTP keeps the remote's default branch head (its HEAD).
const RemoteHEAD = "refs/moat/remote/HEAD"

// FetchHTTP fetches refs (full names under refs/heads/; none means every branch) of the
// remote at rawURL into refs/moat/remote/ (refs/heads/x → refs/moat/remote/heads/x), and
// its HEAD into RemoteHEAD, over http or https only. The URL must carry no credentials:
// the caller serves it on loopback and adds the credential itself, so no secret is ever
// in git's argv or environment. A remote without a HEAD (an empty repository, a dangling
// HEAD) leaves RemoteHEAD unset.
//
// header, if not empty, is a "Name: value" line git sends with every request of the fetch
// (http.extraHeader), also through the environment only: git passes the URL to its
// remote helper in argv, so a listener that must know its caller checks the header.
func (q *Quarantine) FetchHTTP(ctx context.Context, rawURL, header string, refs []string) error {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || u.Host == "" || strings.HasPrefix(rawURL, "-") {
		return fmt.Errorf("fetching: bad remote URL: %w", errdefs.ErrInvalidArgument)
	}
	cfg := []string{"protocol." + u.Scheme + ".allow=always", "http.followRedirects=false"}
	// The URL (the caller's listener may take a secret path) goes in the environment,
	// as the remote's configuration: another local user can read git's argv, not its
	// environment.
	env := []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=remote." + fetchRemote + ".url", "GIT_CONFIG_VALUE_0=" + rawURL}
	if header != "" {
		if strings.ContainsAny(header, "\r\n\x00") || !strings.Contains(header, ":") {
			return fmt.Errorf("fetching: bad header: %w", errdefs.ErrInvalidArgument)
		}
		env = append(env, "GIT_CONFIG_KEY_1=http.extraHeader", "GIT_CONFIG_VALUE_1="+header)
		env[0] = "GIT_CONFIG_COUNT=2"
	}
	args := []string{"fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules"}
	if len(refs) == 0 {
		args = append(args, "--prune", "--end-of-options", fetchRemote, "+refs/heads/*:refs/moat/remote/heads/*")
	} else {
		args = append(args, "--end-of-options", fetchRemote)
		for _, ref := range refs {
			if err := CheckRefName(ref); err != nil || !strings.HasPrefix(ref, "refs/heads/") {
				return fmt.Errorf("fetching %q: %w", ref, errdefs.ErrInvalidArgument)
			}
			args = append(args, "+"+ref+":refs/moat/remote/"+strings.TrimPrefix(ref, "refs/"))
		}
	}
	if _, err := q.run(ctx, invocation{args: append(args, "+HEAD:"+RemoteHEAD), config: cfg, env: env}); err == nil {
		return nil
	}
	// No HEAD (or it does not resolve): the branches alone.
	if _, err := q.run(ctx, invocation{args: args, config: cfg, env: env}); err != nil {
		return fmt.Errorf("fetching from the remote: %w", err)
	}
	_, _ = q.run(ctx, invocation{args: []string{"update-ref", "-d", RemoteHEAD}})
	return nil
}

// ResolveRef returns the commit ref (a full name) points to, or "" when it does not exist.
func (q *Quarantine) ResolveRef(ctx context.Context, ref string) (string, error) {
	if err := CheckRefName(ref); err != nil {
		return "", err
	}
	out, err := q.run(ctx, invocation{args: []string{"rev-parse", "--verify", "--quiet", "--end-of-options", ref + "^{commit}"}, okCodes: []int{1}})
	var ec exitCode
	if errors.As(err, &ec) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(out))
	if err := CheckObjectID(id); err != nil {
		return "", err
	}
	return id, nil
}

// IsAncestor reports whether commit a is an ancestor of commit b (b fast-forwards a); both
// must be in the quarantine.
func (q *Quarantine) IsAncestor(ctx context.Context, a, b string) (bool, error) {
	if _, err := q.checkPair(ctx, a, b); err != nil {
		return false, err
	}
	_, err := q.run(ctx, invocation{args: []string{"merge-base", "--is-ancestor", "--end-of-options", a, b}, okCodes: []int{1}})
	var ec exitCode
	if errors.As(err, &ec) {
		return false, nil
	}
	return err == nil, err
}

// ChangedPaths lists every path whose entry differs between base's tree and tip's (both
// commits in the quarantine; base "" is the empty tree), renames as a deletion and an
// addition (both paths listed). Paths are as git stores them (bytes, not quoted). At most
// MaxFiles paths, errdefs.ErrResourceExhausted beyond: a caller deciding on paths must
// not decide on a part.
func (q *Quarantine) ChangedPaths(ctx context.Context, base, tip string) ([]string, error) {
	base, err := q.checkPair(ctx, base, tip)
	if err != nil {
		return nil, fmt.Errorf("changed paths: %w", err)
	}
	if base == "" {
		base = emptyTree
	}
	out, err := q.run(ctx, invocation{args: []string{"diff-tree", "-r", "-z", "--name-only", "--no-renames", "--no-ext-diff", "--no-textconv", "--end-of-options", base, tip, "--"}})
	if err != nil {
		return nil, fmt.Errorf("changed paths: %w", err)
	}
	var paths []string
	for _, p := range bytes.Split(bytes.TrimSuffix(out, []byte{0}), []byte{0}) {
		if len(p) == 0 {
			continue
		}
		if len(paths) == q.opt.MaxFiles {
			return nil, fmt.Errorf("changed paths: more than %d: %w", q.opt.MaxFiles, errdefs.ErrResourceExhausted)
		}
		paths = append(paths, string(p))
	}
	return paths, nil
}
