package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/moatdev/moat/sdk"
)

// commandArgs splits the arguments of a command that takes leading positionals and then
// a command line (`exec ID CMD ARG...`): its flags must come before CMD, and everything
// from CMD on belongs to CMD, flags included, with or without a `--` before it. cmd's
// flags parse with interspersing off, so cobra stops at the first positional; the rest
// after the lead positionals is parsed here for this command's flags up to CMD.
func commandArgs(cmd *cobra.Command, args []string, lead int) (positional, command []string, err error) {
	if len(args) < lead {
		return nil, nil, fmt.Errorf("want %d argument(s) before the command", lead)
	}
	positional, rest := args[:lead], args[lead:]
	fs := cmd.Flags()
	if err := fs.Parse(rest); err != nil {
		return nil, nil, fmt.Errorf("%w (moat %s's flags go before the command; a command that starts with - goes after --)", err, cmd.Name())
	}
	command = fs.Args()
	if len(command) == 0 {
		return nil, nil, errors.New("no command given: e.g. moat " + cmd.Name() + " ID -- make test")
	}
	return positional, command, nil
}

// forwardSignals passes SIGINT and SIGTERM sent to this process on to a remote command,
// as a terminal passes ^C to its foreground job: the first of them goes to the command
// (through sigs, for sdk.ExecRequest.Signals), which may trap it and end as it likes;
// a second one ends the command (ctx is cancelled, and moat-init kills the command's
// process group when its stream goes). The command's context does not end with parent's
// (which a signal ends): stop releases the signals.
func forwardSignals(parent context.Context) (ctx context.Context, sigs <-chan syscall.Signal, stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	in := make(chan os.Signal, 4)
	out := make(chan syscall.Signal, 4)
	signal.Notify(in, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-done:
				return
			case s := <-in:
				if n++; n > 1 {
					fmt.Fprintln(os.Stderr, "moat: second signal: killing the command")
					cancel()
					continue
				}
				if sig, ok := s.(syscall.Signal); ok {
					select {
					case out <- sig:
					default:
					}
				}
			}
		}
	}()
	var once sync.Once
	return ctx, out, func() {
		once.Do(func() {
			signal.Stop(in)
			close(done)
			cancel()
		})
	}
}

// reportEnd says on stderr why a command ended when the sandbox knows more than its
// status (the OOM killer ended it).
func reportEnd(end *sdk.ExitError) {
	if end.Reason != "" {
		fmt.Fprintf(os.Stderr, "moat: %s: %s\n", termSafe(end.Status), termSafe(end.Reason))
	}
}

// needTerminal fails unless stdin and stdout are terminals: an interactive session
// (shell, exec -t, run -it) on anything else would wait for keys that never come.
func needTerminal(what string) error {
	if !term.IsTerminal(int(os.Stdin.Fd())) || !term.IsTerminal(int(os.Stdout.Fd())) {
		return fmt.Errorf("%s needs a terminal on stdin and stdout; to run a command without one use `moat exec ID -- CMD` (stdin may be piped)", what)
	}
	return nil
}
