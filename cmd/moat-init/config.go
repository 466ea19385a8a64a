package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/moatdev/moat/cmd/moat-init/internal/envd"
)

// Environment variables moat-init reads its configuration from. They are
// removed from its environment once read. None of them is secret: the access
// token comes on stdin (readToken), never through an environment, which other
// processes of the sandbox may read (gVisor shows /proc/1/environ to every user).
const (
	envDefaults    = "MOAT_ENV"
	envDefaultUser = "MOAT_DEFAULT_USER"
	envRuntime     = "MOAT_RUNTIME"
	// envCA is the PEM certificate of the sandbox's interception CA (credential
	// brokering), to add to the trust store. Its key never enters the sandbox.
	envCA = "MOAT_CA_PEM"
	// envNofile is the sandbox's RLIMIT_NOFILE (its limits' nofile), which moat-init sets
	// for itself and so for every process it starts; a runtime that set it from the spec
	// already gives the same.
	envNofile = "MOAT_NOFILE"
	// envLegacyToken is where an older daemon put the access token. It is removed
	// and never used.
	envLegacyToken = "MOAT_ACCESS_TOKEN"
)

// maxTokenBytes bounds what readToken reads from stdin.
const maxTokenBytes = 1024

// config is moat-init's configuration.
type config struct {
	token       envd.Token
	env         map[string]string
	defaultUser string
	caPEM       string
	nofile      uint64 // 0: not given (maxOpenFiles)
	// noTrim turns off the idle memory trim: gVisor (MOAT_RUNTIME=runsc) zero-fills
	// file-backed private pages dropped with MADV_DONTNEED instead of re-reading them,
	// which would wipe moat-init's own code.
	noTrim bool
}

// readToken reads the access token from r (moat-init's stdin: a pipe the daemon wrote the
// token into and closed) up to its end. Surrounding white space is dropped. It fails on
// an empty token or more than maxTokenBytes.
func readToken(r io.Reader) (envd.Token, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTokenBytes+1))
	if err != nil {
		return envd.Token{}, fmt.Errorf("reading the access token from stdin: %w", err)
	}
	if len(b) > maxTokenBytes {
		return envd.Token{}, fmt.Errorf("the access token on stdin is longer than %d bytes", maxTokenBytes)
	}
	tok := envd.NewToken(string(bytes.TrimSpace(b)))
	if tok.Empty() {
		return tok, errors.New("no access token on stdin")
	}
	return tok, nil
}

// configFromEnv reads and unsets the MOAT_* variables; the token is read separately. It
// fails with a MOAT_ENV that is not a JSON object of strings.
func configFromEnv() (config, error) {
	c := config{
		defaultUser: os.Getenv(envDefaultUser),
		noTrim:      os.Getenv(envRuntime) == "runsc",
		caPEM:       os.Getenv(envCA),
	}
	raw, nofile := os.Getenv(envDefaults), os.Getenv(envNofile)
	for _, k := range []string{envLegacyToken, envDefaults, envDefaultUser, envRuntime, envCA, envNofile} {
		os.Unsetenv(k)
	}
	if nofile != "" {
		n, err := strconv.ParseUint(nofile, 10, 64)
		if err != nil || n == 0 {
			return c, fmt.Errorf("%s=%q is not a positive number", envNofile, nofile)
		}
		c.nofile = n
	}
	if c.defaultUser == "" {
		c.defaultUser = "user"
	}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &c.env); err != nil {
			return c, fmt.Errorf("%s is not a JSON object of strings: %w", envDefaults, err)
		}
	}
	return c, nil
}
