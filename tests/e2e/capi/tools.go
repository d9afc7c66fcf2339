//go:build tools

// Package tools pins Cluster API's core manager, which tests/e2e/kube/build.sh compiles for the
// capi suite (the module root is its main package), so `go mod tidy` keeps its modules. A module
// of its own: Cluster API's Kubernetes libraries stay out of kube-apiserver's and helm's builds.
package tools

import _ "sigs.k8s.io/cluster-api"
