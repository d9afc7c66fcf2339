//go:build tools

// Package tools pins the commands build.sh compiles, so `go mod tidy` keeps their modules.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
