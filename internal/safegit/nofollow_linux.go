package safegit

import "syscall"

// syscallONoFollow: open a snapshot file only if it is not a symbolic link, and without
// blocking if it was swapped for a FIFO since the directory was read (the fstat that
// follows then skips it).
const syscallONoFollow = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
