package main

import (
	"fmt"
	"io"

	"github.com/moatdev/moat/internal/doctor"
)

// printDoctorKVM prints the doctor's KVM section: the kind, nesting and what it allows.
func printDoctorKVM(w io.Writer, k *doctor.KVM) {
	if k == nil {
		return
	}
	fmt.Fprintln(w, "KVM")
	fmt.Fprintf(w, "  kind\t%s\t%s\n", k.Kind, k.Detail)
	fmt.Fprintf(w, "  nested\t%s\t\n", k.Nested)
	for _, a := range k.Allows {
		fmt.Fprintf(w, "  \t\t%s\n", a)
	}
	for _, e := range k.Evidence {
		fmt.Fprintf(w, "  evidence\t\t%s\n", e)
	}
}
