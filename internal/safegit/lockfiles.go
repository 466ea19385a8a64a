package safegit

import (
	"path"
	"slices"
)

// lockfileNames are the dependency lockfiles moat points out: a change to one changes what
// code a later install runs. The change report marks them, and the CLI's setup-phase
// lockfile report (cmd/moat) looks for the same names.
func lockfileNames() []string {
	return []string{
		"go.sum", "go.mod",
		"package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb",
		"poetry.lock", "Pipfile.lock", "uv.lock", "requirements.txt",
		"Cargo.lock",
		"Gemfile.lock", "composer.lock", "mix.lock", "pubspec.lock",
	}
}

// LockfileNames returns the file names (no directories) of dependency lockfiles. Each is
// plain ASCII letters, digits, '.', '_' and '-', safe to put in a shell pattern.
func LockfileNames() []string { return slices.Clone(lockfileNames()) }

// IsLockfile reports whether the slash-separated repository path p names a lockfile (by its
// last element, at any depth). It is pure.
func IsLockfile(p string) bool { return slices.Contains(lockfileNames(), path.Base(p)) }
