// Package linux is moat-init's only home of raw system calls: reaping
// children as PID 1 (or as a child subreaper), spawning processes, opening
// pseudo-terminals and running file operations with another user's
// filesystem credentials.
package linux
