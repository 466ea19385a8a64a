// Command dynamic is a dynamically linked program (it uses cgo, so it needs the C library
// and a program interpreter): the daemon must refuse it as moat-init.
package main

// #include <unistd.h>
import "C"

func main() { C.sync() }
