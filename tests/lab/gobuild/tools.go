//go:build tools

// Package tools pins the Kubernetes commands the lab builds, so that `go mod
// tidy` keeps them in go.mod. It is never compiled into anything.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
