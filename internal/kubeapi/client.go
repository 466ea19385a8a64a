package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Caps on what the client reads from the API server.
const (
	maxObject = 1 << 20  // one object (a Pod, a Node, an error Status)
	maxList   = 32 << 20 // one page of a list
	pageSize  = 500      // items asked per page of a list

	requestTimeout = time.Minute     // a whole non-watch request
	tokenMaxAge    = time.Minute     // how long a token read from TokenFile is used before it is read again
	watchTimeout   = 5 * time.Minute // the server ends a watch after this long; WatchPod resumes it
)

// Client calls one API server. It is safe for concurrent use.
type Client struct {
	base      string // Config.Server: https://host:port[/prefix]
	http      *http.Client
	token     string
	tokenFile string

	mu      sync.Mutex
	fileTok string    // last token read from tokenFile
	readAt  time.Time // when

	watchTimeout time.Duration // tests shorten it
}

// New checks cfg and builds a Client: TLS 1.2 or later, the server's certificate verified
// against CAData (system roots if empty), the client certificate if given, no proxy and no
// redirects followed. A bearer token (Token, or TokenFile read now and again every minute)
// goes with every request. Bad input is errdefs.ErrInvalidArgument.
func New(cfg Config) (*Client, error) {
	server, err := checkServer(cfg.Server)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.CAData) > 0 {
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(cfg.CAData) {
			return nil, invalid("the CA data holds no PEM certificate")
		}
	}
	if len(cfg.CertData) > 0 || len(cfg.KeyData) > 0 {
		cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			return nil, invalid("client certificate: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if cfg.Token != "" && cfg.TokenFile != "" {
		return nil, invalid("both a token and a token file are given")
	}
	c := &Client{
		base:         server,
		token:        cfg.Token,
		tokenFile:    cfg.TokenFile,
		watchTimeout: watchTimeout,
	}
	if c.tokenFile != "" {
		if _, err := c.bearer(); err != nil {
			return nil, err
		}
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	c.http = &http.Client{
		Transport: &http.Transport{
			DialContext:           dialer.DialContext,
			TLSClientConfig:       tc,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   16,
		},
		// A redirect would be the server (or someone on its path) sending the request
		// elsewhere: take the 3xx as the answer, which do reports as an error.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// bearer is the token to send, "" for none: Token, or TokenFile's contents, read again
// once tokenMaxAge has passed (a failed re-read keeps the last token).
func (c *Client) bearer() (string, error) {
	if c.tokenFile == "" {
		return c.token, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fileTok != "" && time.Since(c.readAt) < tokenMaxAge {
		return c.fileTok, nil
	}
	b, err := readCapped(c.tokenFile)
	tok := strings.TrimSpace(string(b))
	if err == nil && tok == "" {
		err = invalid("%s is empty", c.tokenFile)
	}
	if err != nil {
		if c.fileTok != "" {
			return c.fileTok, nil
		}
		return "", fmt.Errorf("token file: %w", err)
	}
	c.fileTok, c.readAt = tok, time.Now()
	return tok, nil
}

// do sends one request to path (under /api/v1, already escaped) and returns the response
// if its status is 2xx; else the server's Status as an *apiError. Transport failures are
// errdefs.ErrUnavailable. The caller closes the body.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, contentType string, body []byte) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %w", method, path, err, errdefs.ErrInvalidArgument)
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	tok, err := c.bearer()
	if err != nil {
		return nil, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		}
		return nil, fmt.Errorf("%s %s: %w: %w", method, path, err, errdefs.ErrUnavailable)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxObject))
	return nil, statusError(method, path, resp.StatusCode, b)
}

// call does one bounded request and decodes its answer into out (if not nil), reading at
// most limit bytes.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, contentType string, in, out any, limit int64) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("%s %s: %w: %w", method, path, err, errdefs.ErrInvalidArgument)
		}
	}
	resp, err := c.do(ctx, method, path, q, contentType, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w: %w", method, path, err, errdefs.ErrUnavailable)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("%s %s: the answer is larger than %d bytes: %w", method, path, limit, errdefs.ErrUnavailable)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w: %w", method, path, err, errdefs.ErrUnavailable)
	}
	return nil
}

// podPath is the path of the Pods of namespace ns ("" = all namespaces), or of one of them.
func podPath(ns, name string) (string, error) {
	p := "/api/v1/pods"
	if ns != "" {
		if err := checkName("namespace", ns, 63); err != nil {
			return "", err
		}
		p = "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods"
	}
	if name != "" {
		if err := checkName("pod name", name, 253); err != nil {
			return "", err
		}
		p += "/" + url.PathEscape(name)
	}
	return p, nil
}

// checkName accepts a DNS-1123 name (lower-case letters, digits, '-' and '.', starting and
// ending alphanumeric) of at most max bytes: what Kubernetes allows for namespaces (max 63;
// they have no '.', which the server checks), Pods and Nodes. Anything else is refused
// before it reaches a URL path, where "..", "/" or "%2F" could name another resource.
func checkName(what, s string, max int) error {
	ok := s != "" && len(s) <= max
	for i := 0; ok && i < len(s); i++ {
		ch := s[i]
		alnum := ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9'
		ok = alnum || (ch == '-' || ch == '.') && i > 0 && i < len(s)-1
	}
	if !ok {
		return invalid("%s %q is not a DNS-1123 name of at most %d characters", what, s, max)
	}
	return nil
}

// CreatePod creates p in namespace ns and returns the Pod as the server stored it.
// An existing Pod of the same name is errdefs.ErrAlreadyExists.
func (c *Client) CreatePod(ctx context.Context, ns string, p *Pod) (*Pod, error) {
	if ns == "" || p == nil {
		return nil, invalid("creating a Pod needs a namespace and a Pod")
	}
	path, err := podPath(ns, "")
	if err != nil {
		return nil, err
	}
	in := *p
	in.APIVersion, in.Kind = "v1", "Pod"
	var out Pod
	if err := c.call(ctx, http.MethodPost, path, nil, "application/json", &in, &out, maxObject); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetPod returns Pod ns/name; errdefs.ErrNotFound if there is none.
func (c *Client) GetPod(ctx context.Context, ns, name string) (*Pod, error) {
	path, err := namedPodPath(ns, name)
	if err != nil {
		return nil, err
	}
	var out Pod
	if err := c.call(ctx, http.MethodGet, path, nil, "", nil, &out, maxObject); err != nil {
		return nil, err
	}
	return &out, nil
}

func namedPodPath(ns, name string) (string, error) {
	if ns == "" || name == "" {
		return "", invalid("a Pod needs a namespace and a name")
	}
	return podPath(ns, name)
}

// ListPods lists the Pods of namespace ns ("" = all namespaces) that match labelSelector
// (Kubernetes syntax, passed as given; "" = all), following every page.
func (c *Client) ListPods(ctx context.Context, ns, labelSelector string) ([]Pod, error) {
	path, err := podPath(ns, "")
	if err != nil {
		return nil, err
	}
	pods, _, err := list[Pod](ctx, c, path, selector(labelSelector))
	return pods, err
}

// selector is the query of a list by label selector ("" = all).
func selector(labelSelector string) url.Values {
	q := url.Values{}
	if labelSelector != "" {
		q.Set("labelSelector", labelSelector)
	}
	return q
}

// list reads every page of a list at path and returns the items and the list's
// resourceVersion (of the last page).
func list[T any](ctx context.Context, c *Client, path string, q url.Values) ([]T, string, error) {
	var all []T
	q.Set("limit", strconv.Itoa(pageSize))
	for {
		var page struct {
			Metadata struct {
				Continue        string `json:"continue"`
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Items []T `json:"items"`
		}
		if err := c.call(ctx, http.MethodGet, path, q, "", nil, &page, maxList); err != nil {
			return nil, "", err
		}
		all = append(all, page.Items...)
		if page.Metadata.Continue == "" {
			return all, page.Metadata.ResourceVersion, nil
		}
		if page.Metadata.Continue == q.Get("continue") {
			return nil, "", fmt.Errorf("GET %s: the server repeats its continue token: %w", path, errdefs.ErrUnavailable)
		}
		q.Set("continue", page.Metadata.Continue)
	}
}

// PatchPodMetadata sets the given labels and annotations of Pod ns/name (a JSON merge patch
// of metadata.labels and metadata.annotations: other keys are kept; nil maps change
// nothing) and returns the patched Pod.
func (c *Client) PatchPodMetadata(ctx context.Context, ns, name string, labels, annotations map[string]string) (*Pod, error) {
	path, err := namedPodPath(ns, name)
	if err != nil {
		return nil, err
	}
	type meta struct {
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	patch := struct {
		Metadata meta `json:"metadata"`
	}{meta{labels, annotations}}
	var out Pod
	if err := c.call(ctx, http.MethodPatch, path, nil, "application/merge-patch+json", &patch, &out, maxObject); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePod deletes Pod ns/name, with the given grace period in seconds (nil = the Pod's
// own). A missing Pod is errdefs.ErrNotFound.
func (c *Client) DeletePod(ctx context.Context, ns, name string, gracePeriodSeconds *int64) error {
	path, err := namedPodPath(ns, name)
	if err != nil {
		return err
	}
	q := url.Values{}
	if gracePeriodSeconds != nil {
		q.Set("gracePeriodSeconds", strconv.FormatInt(*gracePeriodSeconds, 10))
	}
	return c.call(ctx, http.MethodDelete, path, q, "", nil, nil, maxObject)
}

// ListNodes lists the Nodes that match labelSelector ("" = all), following every page.
func (c *Client) ListNodes(ctx context.Context, labelSelector string) ([]Node, error) {
	nodes, _, err := list[Node](ctx, c, "/api/v1/nodes", selector(labelSelector))
	return nodes, err
}

// GetNode returns Node name; errdefs.ErrNotFound if there is none.
func (c *Client) GetNode(ctx context.Context, name string) (*Node, error) {
	if err := checkName("node name", name, 253); err != nil {
		return nil, err
	}
	var out Node
	if err := c.call(ctx, http.MethodGet, "/api/v1/nodes/"+url.PathEscape(name), nil, "", nil, &out, maxObject); err != nil {
		return nil, err
	}
	return &out, nil
}

// apiError is a failed request: the HTTP status and the server's Status object.
type apiError struct {
	method, path string
	code         int
	reason       string // Status.reason, e.g. "NotFound", "AlreadyExists", "Expired"
	message      string // Status.message
	class        error  // the errdefs class
}

func (e *apiError) Error() string {
	reason := e.reason
	if reason == "" {
		reason = http.StatusText(e.code)
	}
	return fmt.Sprintf("%s %s: %d %s: %s: %v", e.method, e.path, e.code, reason, e.message, e.class)
}

func (e *apiError) Unwrap() error { return e.class }

// statusError makes the error of an answer with HTTP status code and body, which the API
// server makes a Status object (kind Status, message, reason, code); another body is
// quoted, shortened. The class follows the code: 404 ErrNotFound; 409 ErrConflict, or
// ErrAlreadyExists for reason AlreadyExists; 410 (a resourceVersion too old) ErrConflict;
// 401 ErrUnauthenticated; 403 ErrPermissionDenied; 400, 422 and other 4xx
// ErrInvalidArgument; 429, 5xx and anything else ErrUnavailable.
func statusError(method, path string, code int, body []byte) *apiError {
	e := &apiError{method: method, path: path, code: code}
	var st struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		e.message, e.reason = clip(st.Message, 1024), clip(st.Reason, 64)
	} else {
		e.message = strconv.Quote(clip(string(body), 200))
	}
	switch {
	case code == http.StatusNotFound:
		e.class = errdefs.ErrNotFound
	case code == http.StatusConflict && e.reason == "AlreadyExists":
		e.class = errdefs.ErrAlreadyExists
	case code == http.StatusConflict, code == http.StatusGone:
		e.class = errdefs.ErrConflict
	case code == http.StatusUnauthorized:
		e.class = errdefs.ErrUnauthenticated
	case code == http.StatusForbidden:
		e.class = errdefs.ErrPermissionDenied
	case code == http.StatusTooManyRequests:
		e.class = errdefs.ErrUnavailable
	case code >= 400 && code < 500:
		e.class = errdefs.ErrInvalidArgument
	default:
		e.class = errdefs.ErrUnavailable
	}
	return e
}

// clip shortens s to at most n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// isGone reports whether err is the server's 410 Gone: the resourceVersion asked is older
// than what it keeps.
func isGone(err error) bool {
	var e *apiError
	return errors.As(err, &e) && e.code == http.StatusGone
}
