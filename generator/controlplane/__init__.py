"""A real Kubernetes control plane on this machine: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler built from Go modules, with charts/pytorch-operator
installed and training-operator v1.9.4 running as its Deployment says.

build: the binaries; pki: certificates; components: each component's argv from one typed
configuration; bringup: the named steps that start them, each declaring what it comes after;
supervisor: the background process owning a cluster and running those steps; state: the typed
state file and node options; operator: the chart's install and the operator process; lifecycle:
up and status; teardown: down and purge."""
