package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestInit: POST /init (the daemon handing a warm sandbox to its owner) replaces the
// default environment and user, needs the token, and refuses unknown users.
func TestInit(t *testing.T) {
	in := startInstance(t, `MOAT_ENV={"OLD":"1"}`, "MOAT_DEFAULT_USER=root")
	post := func(token, body string) int {
		req, _ := http.NewRequest(http.MethodPost, in.url+"/init", strings.NewReader(body))
		req.Header.Set("X-Access-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("wrong", `{"envVars":{"A":"x"}}`); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", code)
	}
	if code := post(in.token, `{"defaultUser":"no-such-user"}`); code != http.StatusBadRequest {
		t.Errorf("unknown user: %d", code)
	}
	if code := post(in.token, `{"envVars":{"NEW":"2"},"defaultUser":"`+testUser.name+`"}`); code != http.StatusNoContent {
		t.Fatalf("init: %d", code)
	}
	r := runCmd(t, in.process(), `echo "$OLD|$NEW|$(id -un)"`)
	if got := strings.TrimSpace(r.stdout); got != "|2|"+testUser.name {
		t.Errorf("after init: %q", got)
	}
}
