"""The versions the builds are pinned to, read from our Go modules' go.mod files in either form Go
writes a requirement (a require block, or one `require` line)."""
from generator.controlplane import pins


def test_each_modules_version_is_the_one_its_go_mod_requires(tmp_path):
    assert pins.jobset_version() == "v0.12.0"  # the version Trainer v2.3.0 requires
    assert pins.kube_version().startswith("v1.")
    one_line = tmp_path / "go.mod"
    one_line.write_text("module example\n\ngo 1.26.0\n\nrequire github.com/coredns/coredns v1.15.0\n")
    assert pins.required(one_line, pins.COREDNS_MODULE) == "v1.15.0"


def test_the_kubernetes_binaries_are_stamped_with_their_release():
    """Without it the API server reports v0.0.0-master and Helm refuses charts with a kubeVersion constraint."""
    version = pins.kube_version()
    assert f"k8s.io/component-base/version.gitVersion={version}" in pins.ldflags().split()
