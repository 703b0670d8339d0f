package parse

import (
	"os/exec"
	"syscall"
)

// isolate puts a parser process in its own process group, so a Ctrl-C
// meant for the worker's terminal does not kill it mid-parse (the worker's
// own shutdown decides), and has the kernel kill it when the worker dies,
// however it dies: a child never outlives its worker, spinning or not.
// (The signal comes when the thread that started the child exits; Go keeps
// its threads unless a goroutine locked to one ends, which ragent's never do.)
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
