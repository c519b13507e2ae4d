"""Real OCI images built on this machine: the engine that builds them (Docker where an engine
answers, else podman, installed from Debian's packages when missing), the base image made from
Debian's packages where no registry serves one, and the trainer's image, each built once per
machine into the engine's local store and rebuilt only when what it is built from changes.

This package knows nothing of the control plane: the registry that holds these images, and the
controllers' images made from its binaries, are controlplane/registry.py's."""
