//go:build !linux

package parse

import (
	"os/exec"
	"time"
)

// isolate does nothing where the kernel cannot kill a child with its
// parent: there an idle child exits when its input closes, but a busy one
// runs until its parse ends.
func isolate(*exec.Cmd) {}

// isolateTool does nothing here: see isolate.
func isolateTool(*exec.Cmd) {}

// limitTool does nothing here: only the page timeout bounds an OCR program.
func limitTool(int, int64, time.Duration) {}
