package build

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestParseDockerfile(t *testing.T) {
	df, err := ParseDockerfile([]byte(`# comment
  # indented comment

from debian
ARG V=1
ENV A=1 B="two words" C='single $x' D=esc\ aped
ENV LEGACY value with spaces
RUN apt-get update && \
    # a comment inside a continuation
    apt-get install -y \
      curl
RUN ["/bin/echo", "a b", "c\"d"]
COPY --chown=user:staff a b /dst/
COPY ["with space", "/x"]
WORKDIR /srv
USER user
LABEL "org.x"="y z"
CMD ["npm", "start"]
ENTRYPOINT run me
RUN echo trailing \
`))
	if err != nil {
		t.Fatal(err)
	}
	if df.From != "debian" || df.FromLine != 4 {
		t.Errorf("FROM: %q line %d", df.From, df.FromLine)
	}
	want := []Step{
		{Line: 5, Kind: Arg, Vars: []Var{{"V", "1"}}},
		{Line: 6, Kind: Env, Vars: []Var{{"A", "1"}, {"B", "two words"}, {"C", "single $x"}, {"D", "esc aped"}}},
		{Line: 7, Kind: Env, Vars: []Var{{"LEGACY", "value with spaces"}}},
		{Line: 8, Kind: Run, Shell: "apt-get update && apt-get install -y curl"},
		{Line: 12, Kind: Run, Argv: []string{"/bin/echo", "a b", `c"d`}},
		{Line: 13, Kind: Copy, Sources: []string{"a", "b"}, Dest: "/dst/", Chown: "user:staff"},
		{Line: 14, Kind: Copy, Sources: []string{"with space"}, Dest: "/x"},
		{Line: 15, Kind: Workdir, Path: "/srv"},
		{Line: 16, Kind: User, Path: "user"},
		{Line: 17, Kind: Label, Vars: []Var{{"org.x", "y z"}}},
		{Line: 18, Kind: Cmd, Argv: []string{"npm", "start"}},
		{Line: 19, Kind: Entry, Shell: "run me"},
		{Line: 20, Kind: Run, Shell: "echo trailing"},
	}
	if !reflect.DeepEqual(df.Steps, want) {
		for i := range max(len(want), len(df.Steps)) {
			var g, w Step
			if i < len(df.Steps) {
				g = df.Steps[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("step %d:\n got %+v\nwant %+v", i, g, w)
			}
		}
	}
}

func TestParseDockerfileRefusals(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "no FROM"},
		{"# just a comment\n", "no FROM"},
		{"RUN x\n", "line 1: RUN before FROM"},
		{"ARG X=1\nFROM host\n", "line 1: ARG before FROM"},
		{"FROM host\nFROM debian\n", "line 2: a second FROM"},
		{"FROM host AS build\n", "line 1: FROM takes one"},
		{"FROM --platform=linux/arm64 host\n", "line 1: FROM takes one"},
		{"FROM host\nADD x /y\n", "line 2: ADD is not supported"},
		{"FROM host\nEXPOSE 80\n", "line 2: EXPOSE is not supported"},
		{"FROM host\n\n\nHEALTHCHECK CMD true\n", "line 4: HEALTHCHECK is not supported"},
		{"FROM host\nONBUILD RUN x\n", "line 2: ONBUILD"},
		{"FROM host\nSHELL [\"/bin/bash\"]\n", "line 2: SHELL"},
		{"FROM host\nRUN --mount=type=cache,target=/x true\n", "line 2: RUN flags"},
		{"FROM host\nRUN [\"unterminated\"\n", "line 2: RUN: not a JSON array"},
		{"FROM host\nRUN []\n", "empty exec form"},
		{"FROM host\nRUN\n", "line 2: RUN needs a command"},
		{"FROM host\nCOPY --from=build /a /b\n", "only --chown"},
		{"FROM host\nCOPY onlyone\n", "a source and a destination"},
		{"FROM host\nENV\n", "ENV needs"},
		{"FROM host\nENV A\n", "needs a value"},
		{"FROM host\nENV 1A=x\n", "not a valid variable name"},
		{"FROM host\nENV A=\"open\n", "unterminated"},
		{"FROM host\nWORKDIR\n", "WORKDIR needs a value"},
		{"# syntax=docker/dockerfile:1\nFROM host\n", "parser directives"},
		{"# escape=`\nFROM host\n", "parser directives"},
		{"FROM host\nRUN a\x00b\n", "NUL"},
		{"FROM host\n\x1b[31mRUN x\n", "is not supported"},
	} {
		_, err := ParseDockerfile([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: got %v, want an invalid-argument error with %q", c.in, err, c.want)
		}
	}
}

// FuzzParseDockerfile: the parser never panics, accepts nothing without FROM, and every
// step it returns has a known kind, a line inside the input and text that keys it.
func FuzzParseDockerfile(f *testing.F) {
	for _, s := range []string{
		"FROM host\nRUN echo hi\n",
		"FROM debian\nENV A=1 B=\"x y\"\nCOPY --chown=1:1 a /b\nRUN [\"a\",\"b\"]\n",
		"FROM x\nRUN a \\\n  # c\n  b\nUSER u\nWORKDIR /w\nLABEL a=b\nCMD x\n",
		"FROM x\nENV K 'v'\\\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		df, err := ParseDockerfile(data)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error without ErrInvalidArgument: %v", err)
			}
			return
		}
		if df.From == "" {
			t.Fatal("no FROM accepted")
		}
		lines := strings.Count(string(data), "\n") + 1
		for _, s := range df.Steps {
			switch s.Kind {
			case Run, Copy, Env, Workdir, User, Arg, Label, Cmd, Entry:
			default:
				t.Fatalf("kind %q", s.Kind)
			}
			if s.Line < 1 || s.Line > lines {
				t.Fatalf("line %d of %d", s.Line, lines)
			}
			if s.Kind == Run && len(s.Argv) == 0 && s.Shell == "" {
				t.Fatal("RUN without a command")
			}
			if s.Kind == Copy && (len(s.Sources) == 0 || s.Dest == "") {
				t.Fatal("COPY without source or destination")
			}
			if s.Text() == "" || s.String() == "" {
				t.Fatal("empty text")
			}
		}
	})
}
