// Command etcd is etcd's own server entry point, built in this module because
// `go install go.etcd.io/etcd/server/v3@...` refuses the replace directives the
// etcd repository uses. The version comes from go.mod (the one k8s pins).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
