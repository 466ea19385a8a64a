package envd

import "os"

// Shell lines arrive as /bin/bash -l -c LINE (moat's CLI, E2B's commands.run). A template
// without bash (busybox, distroless with a shell) has /bin/sh, which takes the same -l and
// -c: such requests run there instead of failing.
const (
	bashPath = "/bin/bash"
	shPath   = "/bin/sh"
)

// shellFallback returns the program to run for path (as lookPath resolved it): /bin/sh
// when path is /bin/bash and the sandbox has no bash but a sh.
func shellFallback(path string, exists func(string) bool) string {
	if path == bashPath && !exists(bashPath) && exists(shPath) {
		return shPath
	}
	return path
}

// isExecutable reports whether p is an executable regular file (following links).
func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
