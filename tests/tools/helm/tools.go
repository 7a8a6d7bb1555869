//go:build tools

// Package tools pins the Helm command this wrapper module builds (see
// hack/tools.sh). It is never compiled into anything (build tag "tools").
package tools

import _ "helm.sh/helm/v3/cmd/helm"
