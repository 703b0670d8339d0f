//go:build !linux

package parse

import "os/exec"

// isolate does nothing where the kernel cannot kill a child with its
// parent: there an idle child exits when its input closes, but a busy one
// runs until its parse ends.
func isolate(*exec.Cmd) {}
