package parse

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// memoryError is the failure of a parse whose process outgrew its memory
// cap.
func memoryError(limit int64) error {
	return fmt.Errorf("%w: parsing needed more than %s of memory", ErrTooLarge, formatBytes(limit))
}

// processRSS reads a process's resident set size from /proc. It reports
// false where /proc is missing (not Linux): there only the parse timeout
// bounds a child.
func processRSS(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

// resetPeakRSS restarts a process's peak resident set size (VmHWM) from its
// current size, so peakRSS measures one parse of a reused child. Where the
// kernel does not allow it, peakRSS stays the child's lifetime peak, which
// only errs on the side of the cap.
func resetPeakRSS(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
}

// PeakRSS reads a process's peak resident set size (VmHWM), or 0 where
// /proc does not tell (tests read their parser processes' peaks with it).
func PeakRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
