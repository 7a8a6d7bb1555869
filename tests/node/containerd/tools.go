//go:build tools

// Package tools records the commands this module exists to build (containerd, its runc shim and ctr), so that
// `go mod tidy` keeps their dependencies in go.mod/go.sum. It is never compiled into anything (build tag "tools").
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
