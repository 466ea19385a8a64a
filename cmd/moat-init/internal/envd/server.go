// Package envd serves E2B's envd protocol inside a sandbox: the Connect
// services process.Process and filesystem.Filesystem, and the REST
// endpoints /health, /files and /envs, behind one access-token gate.
package envd

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/moatdev/moat/api/envd/filesystem/filesystemconnect"
	"github.com/moatdev/moat/api/envd/process/processconnect"
	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// Config is what a Server needs.
type Config struct {
	// Token is required on every request but /health, as the
	// X-Access-Token header or (for /files) as a URL signature.
	Token Token
	// DefaultUser serves requests that name no user; when it does not
	// exist, root does.
	DefaultUser string
	// Env holds default environment variables for processes.
	Env map[string]string
	// Users is the sandbox's user database.
	Users *users.DB
	// Reaper collects the exit statuses of started processes.
	Reaper *linux.Reaper
	Log    *slog.Logger
	// Now is the clock for signature expiry; nil means time.Now.
	Now func() time.Time
	// OOMKills reads how many processes the kernel's OOM killer has killed in the
	// sandbox's memory cgroup (OOMKillsFromCgroup); nil: unknown, no process's end is
	// put down to it.
	OOMKills func() uint64
	// UsersRoot is the root whose user database POST /moat/users edits ("": "/"; tests).
	UsersRoot string
}

// Server is the envd service. Create it with New.
type Server struct {
	cfg Config
	// mu guards the defaults that POST /init may replace: cfg.Env and cfg.DefaultUser.
	mu       sync.RWMutex
	procs    *processTable
	logs     *logRegistry // the kept output of processes (logs.go)
	watchers *watcherTable
	errw     *connect.ErrorWriter
	usersMu  sync.Mutex // serializes edits of the user database (users.go)
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{
		cfg:      cfg,
		procs:    newProcessTable(),
		logs:     newLogRegistry(),
		watchers: newWatcherTable(),
		errw:     connect.NewErrorWriter(),
	}
}

// maxMessageBytes bounds one Connect message.
const maxMessageBytes = 32 << 20

// Handler returns the HTTP handler of every route, behind the token gate.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxMessageBytes)}
	mux.Handle(processconnect.NewProcessHandler(&processService{s}, opts...))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{s}, opts...))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /files", s.download)
	mux.HandleFunc("POST /files", s.upload)
	mux.HandleFunc("GET /moat/tar", s.tarDownload)
	mux.HandleFunc("POST /moat/tar", s.tarUpload)
	mux.HandleFunc("GET /envs", func(w http.ResponseWriter, _ *http.Request) {
		env := s.defaults()
		if env == nil {
			env = map[string]string{}
		}
		writeJSON(w, http.StatusOK, env)
	})
	mux.HandleFunc("POST /init", s.init)
	mux.HandleFunc("GET /moat/logs", s.serveLogs)
	mux.HandleFunc("POST /moat/users", s.applyUsers)        // users.go
	mux.HandleFunc("POST /moat/users/remove", s.removeUser) // users.go
	return s.gate(mux)
}

// gate admits /health to anyone, /files to a valid token or URL signature,
// and everything else to a valid token only.
func (s *Server) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			next.ServeHTTP(w, r)
			return
		}
		if s.cfg.Token.Equal(r.Header.Get("X-Access-Token")) {
			next.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/files" {
			err := s.checkSignature(r)
			if err == nil {
				next.ServeHTTP(w, r)
				return
			}
			s.cfg.Log.Info("refused file request", "method", r.Method, "err", err)
			writeError(w, http.StatusUnauthorized, err)
			return
		}
		err := connect.NewError(connect.CodeUnauthenticated, errors.New("missing or invalid access token"))
		if s.errw.IsSupported(r) {
			_ = s.errw.Write(w, r, err)
			return
		}
		writeError(w, http.StatusUnauthorized, err)
	})
}

// checkSignature verifies the signature query parameters of a /files URL.
func (s *Server) checkSignature(r *http.Request) error {
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return errors.New("missing access token or signature")
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	user := q.Get("username")
	candidates := []string{user}
	if user == "" {
		// An SDK that leaves the user to the server may sign with either.
		candidates = append(candidates, s.defaultUserName())
	}
	return s.cfg.Token.VerifySignature(sig, q.Get("path"), op, candidates,
		q.Get("signature_expiration"), s.cfg.Now())
}

func (s *Server) defaultUserName() string {
	s.mu.RLock()
	name := s.cfg.DefaultUser
	s.mu.RUnlock()
	if name != "" {
		if _, err := s.cfg.Users.Lookup(name); err == nil {
			return name
		}
	}
	return "root"
}

// defaults returns the default environment of new processes (never modified in place).
func (s *Server) defaults() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg.Env
}

// initRequest is the body of POST /init: the daemon hands a pre-started (warm) sandbox to
// its owner by setting the owner's defaults. Like envd's orchestrator-only /init.
type initRequest struct {
	EnvVars     map[string]string `json:"envVars"`
	DefaultUser string            `json:"defaultUser"`
}

// init replaces the default environment and user. It needs the access token like every
// route but /health; an unknown user is refused (400) and nothing changes.
func (s *Server) init(w http.ResponseWriter, r *http.Request) {
	var req initRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if req.DefaultUser != "" {
		if _, err := s.cfg.Users.Lookup(req.DefaultUser); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
	}
	env := make(map[string]string, len(req.EnvVars))
	for k, v := range req.EnvVars {
		env[k] = v
	}
	s.mu.Lock()
	s.cfg.Env = env
	if req.DefaultUser != "" {
		s.cfg.DefaultUser = req.DefaultUser
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// user resolves the request's user: name if set, else the default user.
func (s *Server) user(name string) (*users.User, error) {
	if name == "" {
		name = s.defaultUserName()
	}
	u, err := s.cfg.Users.Lookup(name)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	return u, nil
}

// rpcUser resolves the user of a Connect request from its Authorization
// header.
func (s *Server) rpcUser(h http.Header) (*users.User, error) {
	name, err := ParseBasicUser(h.Get("Authorization"))
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	return s.user(name)
}

// credOf is u's identity for the linux package.
func credOf(u *users.User) linux.Cred {
	return linux.Cred{UID: u.UID, GID: u.GID, Groups: u.Groups}
}

type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, err error) {
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// keepaliveInterval is the Keepalive-Ping-Interval request header, in
// seconds, or 0 when absent or invalid.
func keepaliveInterval(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Keepalive-Ping-Interval"))
	if v == "" {
		return 0
	}
	var n int
	for _, c := range v {
		if c < '0' || c > '9' || n > 86400 {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return time.Duration(n) * time.Second
}
