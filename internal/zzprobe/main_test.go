package probe

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/moatdev/moat/sdk"
)

func TestLoop(t *testing.T) {
	c := sdk.NewUnix("/run/moatq/s.sock")
	id := os.Getenv("SB")
	for i := 0; i < 150; i++ {
		var out, errb bytes.Buffer
		code, err := c.Exec(context.Background(), id, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-l", "-c", "cat /etc/nonexist-x"}, User: "root", Stdout: &out, Stderr: &errb})
		if err != nil || code != 1 {
			t.Errorf("iter %d: code %d err %v", i, code, err)
		}
	}
}
