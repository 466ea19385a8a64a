package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestREADMECommands keeps the README's command table true to the CLI: every command a row
// names exists (with each alternative of `a\|b`, and of its first subcommand word), and every
// --flag a row gives is one the command, or a command under it, takes.
func TestREADMECommands(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	root := (&app{}).rootCmd()
	span := regexp.MustCompile("`([^`]*)`")
	flagRE := regexp.MustCompile(`--[a-z][a-z-]*[a-z]`)
	word := regexp.MustCompile(`^[a-z][a-z-]*$`)
	rows := 0
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `moat ") {
			continue
		}
		rows++
		cell := strings.SplitN(strings.ReplaceAll(line, `\|`, "\x00"), "|", 3)[1]
		var last []*cobra.Command // the commands a span of flags alone applies to
		for _, m := range span.FindAllStringSubmatch(cell, -1) {
			text := strings.ReplaceAll(m[1], "\x00", "|")
			fields := strings.Fields(text)
			if len(fields) > 0 && fields[0] == "moat" {
				last = nil
				for _, name := range strings.Split(fields[1], "|") {
					cmd, _, err := root.Find([]string{name})
					if err != nil || cmd == root {
						t.Errorf("README row %q: no command %q", text, name)
						continue
					}
					last = append(last, cmd)
					if len(fields) > 2 && cmd.HasSubCommands() {
						for _, sub := range strings.Split(fields[2], "|") {
							if !word.MatchString(sub) {
								continue
							}
							// A group that takes no arguments of its own (its Use is its name)
							// must have the subcommand; others may take the word as an argument.
							if c, _, err := cmd.Find([]string{sub}); err != nil || c == cmd && !strings.Contains(cmd.Use, " ") {
								t.Errorf("README row %q: no command %q %q", text, name, sub)
							}
						}
					}
				}
			} else if len(fields) > 0 && fields[0] != "moat" && !strings.HasPrefix(fields[0], "-") {
				last = nil // a span of something else (`ID:PATH`, a value) ends what flags apply to
				continue
			}
			for _, f := range flagRE.FindAllString(text, -1) {
				if len(last) == 0 {
					continue
				}
				found := false
				for _, c := range last {
					found = found || hasFlag(c, strings.TrimPrefix(f, "--"))
				}
				if !found {
					t.Errorf("README row %q: %s is no flag of moat %s", text, f, last[0].Name())
				}
			}
		}
	}
	if rows < 20 {
		t.Fatalf("only %d command rows read from the README", rows)
	}
}

// hasFlag says whether c or a command under it takes flag name (its own, inherited or a
// subcommand's).
func hasFlag(c *cobra.Command, name string) bool {
	var look func(c *cobra.Command) bool
	look = func(c *cobra.Command) bool {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.InheritedFlags(), c.PersistentFlags()} {
			if fs.Lookup(name) != nil {
				return true
			}
		}
		for _, sub := range c.Commands() {
			if look(sub) {
				return true
			}
		}
		return false
	}
	return look(c)
}
