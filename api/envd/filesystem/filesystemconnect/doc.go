// Package filesystemconnect holds the generated Connect client and handler
// of the envd filesystem.Filesystem service.
package filesystemconnect
