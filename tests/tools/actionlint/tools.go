//go:build tools

// Package tools pins the actionlint command this wrapper module builds (see
// hack/tools.sh): the linter of .github/workflows that `make lint` runs. It is
// never compiled into anything (build tag "tools").
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
