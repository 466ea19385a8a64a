package safegit

import "syscall"

// syscallONoFollow: open a snapshot file only if it is not a symbolic link.
const syscallONoFollow = syscall.O_NOFOLLOW
