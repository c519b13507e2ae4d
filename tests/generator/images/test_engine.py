"""podman's settings on this kind of machine, and where the base image comes from."""
import resource

import tomllib

from generator import paths
from generator.images import base, engine


def test_containers_get_runc_and_this_processes_own_hard_limits():
    conf = tomllib.loads(engine.containers_conf())
    assert conf["engine"]["runtime"] == "runc"
    limits = dict(item.split("=") for item in conf["containers"]["default_ulimits"])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert limits["nofile"] == f"{hard}:{hard}"


def test_builds_see_this_machines_network_and_ca_bundle_read_only():
    flags = engine.Engine(engine.PODMAN).build_flags()
    assert flags[:2] == ["--network", "host"]
    assert flags[3].endswith(":/etc/ssl/certs/ca-certificates.crt:ro")
    assert engine.Engine(engine.DOCKER).build_flags() == []


def test_the_trainer_dockerfile_names_its_base_as_an_argument_defaulting_to_python_slim():
    assert base.dockerfile_default(paths.TRAINER_DOCKERFILE, "BASE") == "python:3.11-slim"
    assert base.qualified("python:3.11-slim") == "docker.io/library/python:3.11-slim"
    assert base.qualified("curlimages/curl:8.10.1") == "docker.io/curlimages/curl:8.10.1"
    assert base.qualified("ghcr.io/kubeflow/trainer/x:v1") == "ghcr.io/kubeflow/trainer/x:v1"
    assert base.qualified("docker.io/alpine:3.21") == base.qualified("alpine:3.21") == "docker.io/library/alpine:3.21"


def test_the_debian_base_is_named_for_its_release_and_recipe():
    ref = base.reference()
    assert ref.startswith(f"{base.REPOSITORY}:{base.suite()}-")
    argv = base.argv(base.suite(), paths.ROOT / "out.tar")
    assert "--variant=minbase" in argv and any("EXTERNALLY-MANAGED" in a for a in argv)
    assert all(p in argv[2] for p in ("python3-pip", "python-is-python3", "ca-certificates", "passwd", "libgomp1"))


def test_the_administrators_containers_conf_is_kept_under_ours(tmp_path):
    """CONTAINERS_CONF makes podman read our file alone: it holds the machine's settings, ours on top."""
    from generator.images import conf

    usr, etc = tmp_path / "usr.conf", tmp_path / "etc.conf"
    usr.write_text('[containers]\ntz = "local"\ndefault_sysctls = ["net.ipv4.ping_group_range=0 0"]\n')
    etc.write_text('[containers]\ntz = "UTC"\n[engine]\nruntime = "crun"\nevents_logger = "file"\n'
                   '[engine.runtimes]\nrunc = ["/usr/sbin/runc"]\n[network]\ndns_servers = ["10.0.0.53"]\n')
    written = tomllib.loads(conf.text({"containers": {"default_ulimits": ["nofile=1:1"]}, "engine": {"runtime": "runc"}},
                                      [usr, etc]))
    assert written == {"containers": {"tz": "UTC", "default_sysctls": ["net.ipv4.ping_group_range=0 0"],
                                      "default_ulimits": ["nofile=1:1"]},
                       "engine": {"runtime": "runc", "events_logger": "file", "runtimes": {"runc": ["/usr/sbin/runc"]}},
                       "network": {"dns_servers": ["10.0.0.53"]}}
    # podman's own defaults on this machine parse the same way, ours over them.
    machine = tomllib.loads(engine.containers_conf())
    assert machine["engine"]["runtime"] == "runc"
