"""What runs a container's program on this machine for `generator run` (generator/local/):
images as programs, the container's env and command line, its processes, and free ports, as the
kubelet would make them. It imports nothing of the runner's."""
