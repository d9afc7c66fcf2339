// Command etcd runs an etcd server for nicpolicy's end-to-end tests: the upstream etcd command
// line (etcdmain), built from the same module graph as kube-apiserver so both come from the Go
// module proxy and nothing else.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
