package linux

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ReadCount reads a file holding one non-negative decimal integer, such as a sysctl
// under /proc/sys. Values beyond int64 (fs.file-max may be ULONG_MAX) read as the
// largest int64.
func ReadCount(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", path, s)
	}
	return int64(min(u, 1<<63-1)), nil
}
