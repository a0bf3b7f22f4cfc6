package conntrack

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Params reads and writes the kernel's integer parameters by file path:
// sysctls under /proc/sys and module parameters under /sys/module.
type Params interface {
	Get(path string) (int, error)
	Set(path string, value int) error
}

// FileParams is the real Params: it reads and writes the files.
type FileParams struct{}

var _ Params = FileParams{}

// Get implements Params.
func (FileParams) Get(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s holds %q, not an integer", path, strings.TrimSpace(string(b)))
	}
	return v, nil
}

// Set implements Params.
func (FileParams) Set(path string, value int) error {
	return os.WriteFile(path, []byte(strconv.Itoa(value)), 0o644)
}
