package safegit

import "path"

// lockfileNames are the dependency lockfiles moat points out in a change report: a change
// to one changes what code a later install runs. The same names as the setup phase's
// lockfile report in cmd/moat (lockfileScript).
var lockfileNames = map[string]bool{
	"go.sum": true, "go.mod": true,
	"package-lock.json": true, "npm-shrinkwrap.json": true, "yarn.lock": true, "pnpm-lock.yaml": true, "bun.lockb": true,
	"poetry.lock": true, "Pipfile.lock": true, "uv.lock": true, "requirements.txt": true,
	"Cargo.lock":   true,
	"Gemfile.lock": true, "composer.lock": true, "mix.lock": true, "pubspec.lock": true,
}

// IsLockfile reports whether the slash-separated repository path p names a lockfile (by its
// last element, at any depth). It is pure.
func IsLockfile(p string) bool { return lockfileNames[path.Base(p)] }
