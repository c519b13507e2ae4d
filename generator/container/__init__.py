"""What runs a container on this machine, shared by `generator run` (generator/local/) and the
process node (generator/controlplane/kubelet/): images as programs, the container's env and
command line, its processes, and free ports. It imports neither of them."""
