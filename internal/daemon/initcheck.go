package daemon

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
)

// checkStaticELF reports whether data is a statically linked ELF executable: one with no
// program interpreter (PT_INTERP) and no shared-library dependency (DT_NEEDED). moat-init
// starts as PID 1 on the sandbox's own root filesystem, where a dynamic loader and its
// libraries would be whatever the template (or the sandbox, on resume) put there; a static
// binary loads nothing from it. It returns nil or an error saying what is wrong
// (FuzzCheckStaticELF: any bytes, no panic).
func checkStaticELF(data []byte) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("not an ELF executable (type %s)", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (it names a program interpreter)")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("reading its dynamic section: %w", err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("dynamically linked (it needs %q)", libs)
	}
	return nil
}
