// Package sdk is the Go client of the moat daemon. The moat CLI uses it and nothing else to
// reach the daemon. It speaks the native REST API (api/v1) and, for processes and files,
// the envd protocol that the daemon forwards to each sandbox's moat-init.
package sdk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// DefaultSocket is where the daemon listens unless told otherwise.
const DefaultSocket = "/run/moat/moat.sock"

// Client talks to one moat daemon. Safe for concurrent use.
type Client struct {
	base   string // e.g. http://moat (unix socket) or http://127.0.0.1:7070
	http   *http.Client
	apiKey string
}

// NewUnix returns a client for the daemon listening on the unix socket at path.
func NewUnix(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{base: "http://moat", http: &http.Client{Transport: tr}}
}

// NewHTTP returns a client for a daemon's TCP listener with an API key.
func NewHTTP(baseURL, apiKey string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{}, apiKey: apiKey}
}

// HTTPClient is the client's HTTP client, for envd calls made with generated clients.
func (c *Client) HTTPClient() *http.Client { return c.http }

// Error is a non-2xx answer from the daemon. errors.Is matches the sdk's Err* values by
// class.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Is maps the daemon's error codes onto the sdk's sentinel errors.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == "not_found"
	case ErrInvalidArgument:
		return e.Code == "invalid_argument"
	case ErrConflict:
		return e.Code == "conflict" || e.Code == "already_exists"
	case ErrUnavailable:
		return e.Code == "unavailable"
	case ErrResourceExhausted:
		return e.Code == "resource_exhausted"
	case ErrUnauthenticated:
		return e.Code == "unauthenticated"
	case ErrPermissionDenied:
		return e.Code == "permission_denied"
	}
	return false
}

// Error classes returned (wrapped) by the client.
var (
	ErrNotFound        = errors.New("not found")
	ErrInvalidArgument = errors.New("invalid argument")
	ErrConflict        = errors.New("conflict")
	ErrUnavailable     = errors.New("unavailable")
	// ErrResourceExhausted: the host has no room for this now (e.g. the data filesystem
	// cannot hold another drive of the asked size); deleting sandboxes or asking for less
	// can make it succeed.
	ErrResourceExhausted = errors.New("resource exhausted")
	ErrUnauthenticated   = errors.New("unauthenticated")
	// ErrPermissionDenied: the caller may not do this (e.g. an API key binding a secret it
	// is not granted, or a binding outside the secret's scope).
	ErrPermissionDenied = errors.New("permission denied")
	// ErrNoDaemon: nothing answers at the daemon's address.
	ErrNoDaemon = errors.New("moat daemon not reachable")
	// ErrDaemonAccess: the daemon's socket exists but this process may not connect to it
	// (the socket is root's, mode 0600). Not ErrNoDaemon: a daemon may well run there.
	ErrDaemonAccess = errors.New("permission denied on the moat daemon's socket")
)

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding %s %s response: %w", method, path, err)
	}
	return nil
}

// send performs a request and turns non-2xx answers into *Error.
func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.sendRequest(req)
}

// sendRequest performs req with the client's credentials and turns non-2xx answers into
// *Error.
func (c *Client) sendRequest(req *http.Request) (*http.Response, error) {
	method, path := req.Method, strings.TrimPrefix(req.URL.String(), c.base)
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			if errors.Is(err, os.ErrPermission) {
				return nil, fmt.Errorf("%w: %v", ErrDaemonAccess, err)
			}
			return nil, fmt.Errorf("%w: %v", ErrNoDaemon, err)
		}
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var e v1.Error
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		// The daemon answers {"code": "<class>", "message": ...}; a sandbox's moat-init,
		// through the envd gateway, {"code": <status>, "message": ...}: the message is
		// kept either way (a mistyped code is only skipped).
		_ = json.Unmarshal(data, &e)
		if e.Message == "" {
			e.Message = fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(data)))
		}
		if e.Code == "" {
			e.Code = codeForStatus(resp.StatusCode)
		}
		return nil, &Error{Status: resp.StatusCode, Code: e.Code, Message: e.Message}
	}
	return resp, nil
}

func (c *Client) authorize(req *http.Request) {
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
}

// Ping checks that the daemon answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/v1/health", nil, nil)
}

// Create makes and starts a sandbox.
func (c *Client) Create(ctx context.Context, req v1.CreateSandboxRequest) (*v1.Sandbox, error) {
	var sb v1.Sandbox
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes", req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// List returns every sandbox.
func (c *Client) List(ctx context.Context) ([]v1.Sandbox, error) {
	var out []v1.Sandbox
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes", nil, &out)
	return out, err
}

// Get returns one sandbox.
func (c *Client) Get(ctx context.Context, id string) (*v1.Sandbox, error) {
	var sb v1.Sandbox
	if err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id), nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

func (c *Client) lifecycle(ctx context.Context, id, op string) (*v1.Sandbox, error) {
	var sb v1.Sandbox
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/"+op, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Stop stops a sandbox's processes and keeps its drive.
func (c *Client) Stop(ctx context.Context, id string) (*v1.Sandbox, error) {
	return c.lifecycle(ctx, id, "stop")
}

// Start starts a stopped sandbox again.
func (c *Client) Start(ctx context.Context, id string) (*v1.Sandbox, error) {
	return c.lifecycle(ctx, id, "start")
}

// Pause freezes a sandbox's processes.
func (c *Client) Pause(ctx context.Context, id string) (*v1.Sandbox, error) {
	return c.lifecycle(ctx, id, "pause")
}

// Resume thaws a paused sandbox.
func (c *Client) Resume(ctx context.Context, id string) (*v1.Sandbox, error) {
	return c.lifecycle(ctx, id, "resume")
}

// Delete removes a sandbox; the daemon finishes the teardown in the background.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(id), nil, nil)
}

// Events returns a sandbox's lifecycle events.
func (c *Client) Events(ctx context.Context, id string) ([]v1.Event, error) {
	var out []v1.Event
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/events", nil, &out)
	return out, err
}

// Templates lists the templates.
func (c *Client) Templates(ctx context.Context) ([]v1.Template, error) {
	var out []v1.Template
	err := c.do(ctx, http.MethodGet, "/v1/templates", nil, &out)
	return out, err
}

// TemplateOp runs op ("build", "import" or "pull"), calling progress for each progress
// line, and returns the resulting template.
func (c *Client) TemplateOp(ctx context.Context, op string, req v1.TemplateRequest, progress func(string)) (*v1.Template, error) {
	resp, err := c.send(ctx, http.MethodPost, "/v1/templates/"+url.PathEscape(op), req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var p v1.Progress
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("decoding progress: %w", err)
		}
		if p.Done {
			if p.Error != "" {
				return nil, errors.New(p.Error)
			}
			return p.Result, nil
		}
		if progress != nil {
			progress(p.Message)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("template operation ended without a result")
}

// Doctor returns the daemon host's doctor report as JSON.
func (c *Client) Doctor(ctx context.Context, out any) error {
	return c.do(ctx, http.MethodGet, "/v1/doctor", nil, out)
}

// CreateAPIKey makes a new API key for the daemon's TCP listener, granted the named
// secrets: the only ones its clients may bind (none by default). Only the daemon's unix
// socket accepts key management.
func (c *Client) CreateAPIKey(ctx context.Context, secrets ...string) (*v1.APIKey, error) {
	var k v1.APIKey
	var body any
	if len(secrets) > 0 {
		body = v1.APIKeyRequest{Secrets: secrets}
	}
	if err := c.do(ctx, http.MethodPost, "/v1/apikeys", body, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// CreateAPIKeyWith makes a new API key as req says: its grants and its maxima of the
// limits of the sandboxes it creates.
func (c *Client) CreateAPIKeyWith(ctx context.Context, req v1.APIKeyRequest) (*v1.APIKey, error) {
	var k v1.APIKey
	if err := c.do(ctx, http.MethodPost, "/v1/apikeys", req, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// SetAPIKeyMax makes max the maxima of API key id (zero fields: none of its own; the
// daemon's maxima and the host still apply). Its sandboxes keep their limits; its next
// creates are bounded by max.
func (c *Client) SetAPIKeyMax(ctx context.Context, id string, max v1.KeyMaxima) (*v1.APIKey, error) {
	var k v1.APIKey
	if err := c.do(ctx, http.MethodPut, "/v1/apikeys/"+url.PathEscape(id)+"/max", max, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// SetAPIKeySecrets makes secrets the grants of API key id, replacing those it had (none:
// it may bind no secret).
func (c *Client) SetAPIKeySecrets(ctx context.Context, id string, secrets []string) (*v1.APIKey, error) {
	if secrets == nil {
		secrets = []string{}
	}
	var k v1.APIKey
	if err := c.do(ctx, http.MethodPut, "/v1/apikeys/"+url.PathEscape(id)+"/secrets", v1.APIKeyRequest{Secrets: secrets}, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// APIKeys lists API keys (without the keys themselves).
func (c *Client) APIKeys(ctx context.Context) ([]v1.APIKey, error) {
	var out []v1.APIKey
	err := c.do(ctx, http.MethodGet, "/v1/apikeys", nil, &out)
	return out, err
}

// DeleteAPIKey removes an API key by id.
func (c *Client) DeleteAPIKey(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/apikeys/"+url.PathEscape(id), nil, nil)
}

// SetPolicy changes a sandbox's egress policy, its phase, or both. It applies at once to a
// running sandbox: the response says how many open connections were cut.
func (c *Client) SetPolicy(ctx context.Context, id string, req v1.SetPolicyRequest) (*v1.SetPolicyResponse, error) {
	var out v1.SetPolicyResponse
	if err := c.do(ctx, http.MethodPut, "/v1/sandboxes/"+url.PathEscape(id)+"/policy", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Egress returns the sandbox's egress log entries after seq after, oldest first.
func (c *Client) Egress(ctx context.Context, id string, after int64) ([]v1.EgressEntry, error) {
	var out []v1.EgressEntry
	err := c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/sandboxes/%s/egress?after=%d", url.PathEscape(id), after), nil, &out)
	return out, err
}

// FollowEgress streams the sandbox's egress log from seq after, calling fn for each entry
// (an entry of a connection still open comes again when it ends), until ctx ends, the
// sandbox is deleted, or fn returns an error.
func (c *Client) FollowEgress(ctx context.Context, id string, after int64, fn func(v1.EgressEntry) error) error {
	resp, err := c.send(ctx, http.MethodGet, fmt.Sprintf("/v1/sandboxes/%s/egress?follow=1&after=%d", url.PathEscape(id), after), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var e v1.EgressEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("decoding egress entry: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

// Diff reports what sandbox id's /workspace changes against the commit its --repo layer
// was made from.
func (c *Client) Diff(ctx context.Context, id string) (*v1.WorkspaceDiff, error) {
	var out v1.WorkspaceDiff
	if err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/diff", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DiffPatch returns the patch of sandbox id's /workspace against its base (git diff
// format). The caller closes it.
func (c *Client) DiffPatch(ctx context.Context, id string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/diff/patch", nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Export writes sandbox id's /workspace into its host repository as an agent/ branch.
func (c *Client) Export(ctx context.Context, id string, req v1.ExportRequest) (*v1.ExportResult, error) {
	var out v1.ExportResult
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/export", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
