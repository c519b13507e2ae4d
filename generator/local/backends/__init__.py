"""How `generator run` runs a job's pods: each backend a package (processes/: host processes;
containers/: a container of its image each, on a network of the job's own), one interface
(base.py), chosen once by the command, as the Kubeflow SDK's TrainerClient takes its backend."""
