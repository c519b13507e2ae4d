"""A real node for the local cluster (`cluster up`'s default where it can run): the kubelet of the
control plane's Kubernetes release, containerd v2 and runc run the pods from images, in the
cluster's own cgroup, on the cluster's bridge. Built only when asked (build.py); configured by pure
functions (config.py); started as one bring-up step (node.py); undone at `cluster down` (host.py).
Whether this machine can run it, and why not (support.py), decides the node `cluster up` starts."""

# On the real node's Node object: `diagnose` tells a pull from the registry on this machine, where
# `image load` is the fix, from a pull on any other cluster.
NODE_LABEL = "pytorchjob-kit/node"
NODE_LABEL_VALUE = "real"
