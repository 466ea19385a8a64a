package main

// execArgv is how `moat exec ID -- CMD [ARG...]` runs its command. One argument is a shell
// line, run by a login shell as the sandbox's user (bash -l -c --, so that a line starting
// with "-" is a command, not an option; the sandbox runs it with sh where the template has
// no bash). Several are the program and its arguments, run
// directly: no shell parses them and none starts (PATH is the sandbox's default and the
// template's; profile scripts are not read).
func execArgv(args []string) (cmd string, argv []string) {
	if len(args) == 1 {
		return "/bin/bash", []string{"-l", "-c", "--", args[0]}
	}
	return args[0], args[1:]
}
