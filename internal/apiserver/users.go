package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Agents as Linux users (issue 15; sandbox/useradd.go).

// Users adds, lists and removes the accounts moat adds to a sandbox.
type Users interface {
	AddUser(ctx context.Context, id string, s sandbox.UserSpec) (*sandbox.User, error)
	Users(ctx context.Context, id string) ([]sandbox.User, []sandbox.SharedGroup, error)
	RemoveUser(ctx context.Context, id, name string, keepHome bool) error
}

// SetUsers enables the user routes (before the server is used).
func (s *Server) SetUsers(u Users) { s.users = u }

func (s *Server) userRoutes() []route {
	return []route{
		{"POST /v1/sandboxes/{id}/users", s.addUser, byKey},
		{"GET /v1/sandboxes/{id}/users", s.listUsers, byKey},
		{"DELETE /v1/sandboxes/{id}/users/{name}", s.removeUser, byKey},
	}
}

func (s *Server) usersOrError(w http.ResponseWriter) bool {
	if s.users == nil {
		writeError(w, fmt.Errorf("users are not available: %w", errdefs.ErrNotImplemented))
		return false
	}
	return true
}

// addUser serves POST /v1/sandboxes/{id}/users (v1.UserRequest): 201 with the v1.User.
func (s *Server) addUser(w http.ResponseWriter, r *http.Request) {
	if !s.usersOrError(w) {
		return
	}
	var req v1.UserRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	s.touch(r)
	u, err := s.users.AddUser(r.Context(), r.PathValue("id"), sandbox.UserSpec{Name: req.Name, Groups: req.Groups, Sudo: req.Sudo})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, toAPIUser(*u))
}

// listUsers serves GET /v1/sandboxes/{id}/users (v1.UserList).
func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) {
	if !s.usersOrError(w) {
		return
	}
	users, groups, err := s.users.Users(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := v1.UserList{Users: []v1.User{}, Groups: []v1.SharedGroup{}}
	u, g := toAPIUsers(users, groups)
	out.Users, out.Groups = append(out.Users, u...), append(out.Groups, g...)
	writeJSON(w, http.StatusOK, out)
}

// removeUser serves DELETE /v1/sandboxes/{id}/users/{name}[?keep_home=true]: 204.
func (s *Server) removeUser(w http.ResponseWriter, r *http.Request) {
	if !s.usersOrError(w) {
		return
	}
	keep := false
	if v := r.URL.Query().Get("keep_home"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, fmt.Errorf("keep_home=%q: want true or false: %w", v, errdefs.ErrInvalidArgument))
			return
		}
		keep = b
	}
	s.touch(r)
	if err := s.users.RemoveUser(r.Context(), r.PathValue("id"), r.PathValue("name"), keep); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func fromAPIUsers(in []v1.UserRequest) []sandbox.UserSpec {
	var out []sandbox.UserSpec
	for _, u := range in {
		out = append(out, sandbox.UserSpec{Name: u.Name, Groups: u.Groups, Sudo: u.Sudo})
	}
	return out
}

func toAPIUser(u sandbox.User) v1.User {
	out := v1.User{Name: u.Name, UID: u.UID, GID: u.GID, Home: "/home/" + u.Name, Groups: u.Groups, Sudo: u.Sudo}
	if e := u.Egress; e != nil {
		out.Egress = &v1.UserEgress{Allow: e.Allow, Credentials: e.Credentials}
	}
	return out
}

// toAPIUsers is a record's users and shared groups (with their members) as the API shows
// them.
func toAPIUsers(users []sandbox.User, groups []sandbox.SharedGroup) ([]v1.User, []v1.SharedGroup) {
	var us []v1.User
	var gs []v1.SharedGroup
	for _, u := range users {
		us = append(us, toAPIUser(u))
	}
	for _, g := range groups {
		sg := v1.SharedGroup{Name: g.Name, GID: g.GID, Dir: "/shared/" + g.Name, Members: []string{}}
		for _, u := range users {
			if slices.Contains(u.Groups, g.Name) {
				sg.Members = append(sg.Members, u.Name)
			}
		}
		gs = append(gs, sg)
	}
	return us, gs
}
