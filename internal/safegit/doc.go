// Package safegit is the host side of moat's git gate: it runs git on the host over
// objects that came from a hostile sandbox, and computes what a change does.
//
// Everything here assumes the objects are written by an attacker. The rules that make
// that safe are enforced in one place, [Runner]:
//
//   - git runs with an empty environment plus a fixed list (PATH, an empty HOME,
//     GIT_CONFIG_NOSYSTEM=1, GIT_CONFIG_GLOBAL=/dev/null, GIT_ATTR_NOSYSTEM=1,
//     GIT_TERMINAL_PROMPT=0, GIT_NO_REPLACE_OBJECTS=1, ...), always with an explicit
//     --git-dir and never with a work tree, and with command-line overrides (-c) that turn
//     off hooks (core.hooksPath=/dev/null), fsmonitor, ssh, askpass, credential helpers,
//     every transport protocol unless one is needed, mailmap, signatures and pagers, and
//     turn on fsck of every received object;
//   - the only repository configuration git reads is the quarantine's own config file,
//     written by moat (see [Quarantine]) — or, for [Quarantine.Export], the user's own
//     repository's config, which is the user's, never the sandbox's;
//   - output is bounded, every invocation has a deadline, and cancelling kills git's whole
//     process group.
//
// A [Quarantine] is a bare repository per sandbox and remote in a moat-owned directory.
// [Quarantine.ReceivePack] indexes a pack the sandbox pushed (strictly, fsck'd, bounded in
// bytes and objects); [Quarantine.Report] and [Quarantine.Patch] describe a change between
// two commits; [Quarantine.CommitSnapshot] turns a directory tree (the sandbox's workspace
// as seen from the host) into a commit without ever pointing git at it; and
// [Quarantine.Export] writes a commit into the user's repository as a new branch under
// refs/heads/agent/ without touching the user's HEAD, index or work tree and without
// running the user's hooks.
//
// The decisions about which refs and paths a push may touch live in package gitgate; this
// package takes object ids, ref names and pack bytes.
package safegit
