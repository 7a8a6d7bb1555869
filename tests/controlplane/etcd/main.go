// Command etcd is a plain etcd server, equivalent to the upstream `etcd`
// binary (go.etcd.io/etcd/v3 main.go). It lives in its own module so that
// etcd's dependency versions are resolved exactly as etcd pins them, without
// being raised or lowered by the Kubernetes module graph next door.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
