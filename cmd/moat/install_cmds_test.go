package main

import "testing"

func TestSystemdQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/local/bin/moat":   "/usr/local/bin/moat",
		"--listen=127.0.0.1:80": "--listen=127.0.0.1:80",
		"--data=/srv/moat data": `"--data=/srv/moat data"`,
		`a"b\c`:                 `"a\"b\\c"`,
		"50%":                   "50%%",
		"$HOME":                 "$$HOME",
		"line\nbreak":           `"line\nbreak"`,
		"tab\tx":                `"tab\tx"`,
		"bell\x07":              `"bell\x07"`,
		"":                      `""`,
		"semi;colon":            `"semi;colon"`,
		"--git-protected=**/x*": `"--git-protected=**/x*"`,
	} {
		if got := systemdQuote(in); got != want {
			t.Errorf("systemdQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
