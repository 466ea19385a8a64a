package envd

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// Accounts moat adds to the sandbox (issue 15): the daemon sends its record, moat-init
// makes /etc/passwd, /etc/group, /etc/shadow, homes, shared directories and sudoers
// match it (internal/users Apply and Remove). Only the daemon calls these (the access
// token gates them as every route).

// UsersRemoval is the body of POST /moat/users/remove.
type UsersRemoval struct {
	State    users.State `json:"state"` // the record without the user
	Name     string      `json:"name"`
	UID      uint32      `json:"uid"`
	KeepHome bool        `json:"keep_home,omitempty"`
}

// applyUsers serves POST /moat/users: the body is the whole users.State; 204 when the
// sandbox matches it.
func (s *Server) applyUsers(w http.ResponseWriter, r *http.Request) {
	var st users.State
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&st); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("users: %w", err))
		return
	}
	s.usersMu.Lock()
	err := users.Files{Root: s.usersRoot()}.Apply(st)
	s.usersMu.Unlock()
	if err != nil {
		s.cfg.Log.Error("applying users", "err", err)
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	s.cfg.Log.Info("users applied", "users", len(st.Users), "groups", len(st.Groups))
	w.WriteHeader(http.StatusNoContent)
}

// removeUser serves POST /moat/users/remove (UsersRemoval): the user's processes are
// killed, its entries and sudoers file removed, its home too unless keep_home.
func (s *Server) removeUser(w http.ResponseWriter, r *http.Request) {
	var req UsersRemoval
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || req.Name == "" {
		writeError(w, http.StatusBadRequest, fmt.Errorf("users: bad removal request (%v)", err))
		return
	}
	s.usersMu.Lock()
	err := users.Files{Root: s.usersRoot()}.Remove(req.State, req.Name, req.UID, req.KeepHome)
	s.usersMu.Unlock()
	if err != nil {
		s.cfg.Log.Error("removing a user", "user", req.Name, "err", err)
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	s.cfg.Log.Info("user removed", "user", req.Name, "keep_home", req.KeepHome)
	w.WriteHeader(http.StatusNoContent)
}

// usersRoot is where the user database lives: "/" unless a test says otherwise.
func (s *Server) usersRoot() string {
	if s.cfg.UsersRoot != "" {
		return s.cfg.UsersRoot
	}
	return "/"
}
