//go:build tools

// Package tools pins the promtool command this wrapper module builds (see
// hack/tools.sh). It is never compiled into anything (build tag "tools").
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
