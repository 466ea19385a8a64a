package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/moatdev/moat/cmd/moat-init/internal/envd"
)

// Environment variables moat-init reads its configuration from. They are
// removed from its environment once read.
const (
	envToken       = "MOAT_ACCESS_TOKEN"
	envDefaults    = "MOAT_ENV"
	envDefaultUser = "MOAT_DEFAULT_USER"
	envRuntime     = "MOAT_RUNTIME"
	// envCA is the PEM certificate of the sandbox's interception CA (credential
	// brokering), to add to the trust store. Its key never enters the sandbox.
	envCA = "MOAT_CA_PEM"
)

// config is moat-init's configuration from the environment.
type config struct {
	token       envd.Token
	env         map[string]string
	defaultUser string
	caPEM       string
	// noTrim turns off the idle memory trim: gVisor (MOAT_RUNTIME=runsc) zero-fills
	// file-backed private pages dropped with MADV_DONTNEED instead of re-reading them,
	// which would wipe moat-init's own code.
	noTrim bool
}

// configFromEnv reads and unsets the MOAT_* variables. It fails without an
// access token or with a MOAT_ENV that is not a JSON object of strings.
func configFromEnv() (config, error) {
	c := config{
		token:       envd.NewToken(os.Getenv(envToken)),
		defaultUser: os.Getenv(envDefaultUser),
		noTrim:      os.Getenv(envRuntime) == "runsc",
		caPEM:       os.Getenv(envCA),
	}
	raw := os.Getenv(envDefaults)
	for _, k := range []string{envToken, envDefaults, envDefaultUser, envRuntime, envCA} {
		os.Unsetenv(k)
	}
	if c.token.Empty() {
		return c, errors.New(envToken + " is not set")
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
