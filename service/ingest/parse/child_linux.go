package parse

import (
	"time"

	"golang.org/x/sys/unix"
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

// isolateTool has the kernel kill an OCR program when the parser process
// that started it dies (killed for its time or memory), so none outlives
// its parse.
func isolateTool(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// limitTool caps a started OCR program's address space and CPU time. It
// is set right after the program starts: in the moment between, the
// program is still loading its libraries, and what it reads was checked
// for size before (checkImage, the crop of a rendered page), so the cap is
// a second line, not the first.
func limitTool(pid int, memory int64, cpu time.Duration) {
	_ = unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: uint64(memory), Max: uint64(memory)}, nil)
	secs := uint64(max(1, cpu/time.Second))
	_ = unix.Prlimit(pid, unix.RLIMIT_CPU, &unix.Rlimit{Cur: secs, Max: secs + 1}, nil)
}
