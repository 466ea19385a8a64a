// Package processconnect holds the generated Connect client and handler of
// the envd process.Process service.
package processconnect
