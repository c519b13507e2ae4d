//go:build tools

// The real node's container runtime: containerd v2, its runc shim and ctr, built from the
// release go.mod requires (Debian's containerd is 1.6, too old for the kubelet's CRI).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
