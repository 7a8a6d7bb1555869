//go:build tools

// Package tools records the commands this module exists to build, so that
// `go mod tidy` keeps their dependencies in go.mod/go.sum. It is never
// compiled into anything (build tag "tools").
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
