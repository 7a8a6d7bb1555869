// Command pause is the process of a pod sandbox: it holds the pod's namespaces open and does nothing else. As PID 1
// of the pod it reaps the zombies of processes that are reparented to it (shared process namespace) and exits at
// once on SIGINT or SIGTERM, so a pod stops without waiting for its grace period. It does what Kubernetes' own
// pause does, in Go so the image builds with nothing but the Go toolchain.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (neuron-dra-operator local node)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", s)
			os.Exit(0)
		}
		for {
			// Reap every child that has exited; stop when none is left to wait for.
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
