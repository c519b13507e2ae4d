"""The Helm releases `cluster up` installs on its node, each data of one type (base.Release) that
one install routine and one readiness wait take: the operator chart (operator.py), Kubeflow
Trainer with JobSet (trainer.py) and Kueue (kueue.py)."""
from generator.controlplane.releases import kueue, operator, trainer

ALL = (operator.RELEASE, trainer.RELEASE, kueue.RELEASE)
VALUES_FILES = tuple(r.values_file for r in ALL)  # in the cluster's folder: `cluster down --purge` removes them
