//go:build tools

// Package tools pins the helm command tests/e2e/kube/build.sh compiles, so `go mod tidy` keeps
// its modules. A module of its own: helm's Kubernetes libraries stay out of kube-apiserver's
// build.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
