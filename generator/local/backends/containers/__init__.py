"""The containers backend (`run --container`): each pod a container of its own image on a network of
the job's own (backend.py; the network and what a run owns: network.py; what podman changes on the
machine, put back: hostnet.py; each pod's container: spec.py; its `engine run`: command.py; the
local image each image runs as: images.py)."""
