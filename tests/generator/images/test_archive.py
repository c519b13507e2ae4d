"""`image load ARCHIVE`: a hostile archive is refused naming its member, before anything starts,
and nothing is written outside the private folder an OCI archive is unpacked into."""
from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

import pytest

from generator.controlplane.realnode import oci
from generator.errors import UserError
from generator.images import archive
from tests.support.cli_helpers import run

HEX = "ab" * 32


def write_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info, data


LAYOUT = [member("oci-layout", data=b'{"imageLayoutVersion":"1.0.0"}'), member("index.json", data=b"{}")]


def test_the_reviews_archive_writes_nothing_through_its_link_and_is_refused_naming_the_member(tmp_path):
    """blobs/sha256 -> a folder outside, then blobs/sha256/owned.txt: skopeo's oci-archive unpacking
    followed the link as root. `image load` refuses it before it starts anything."""
    outside = tmp_path / "cron.d"
    outside.mkdir()
    hostile = write_tar(tmp_path / "hostile.tar", [*LAYOUT, member("blobs", tarfile.DIRTYPE),
                                                   member("blobs/sha256", tarfile.SYMTYPE, str(outside)),
                                                   member("blobs/sha256/owned.txt", data=b"* * * * * root id\n")])
    code, out, err = run("image", "load", str(hostile), "--as", "registry.example.com/ml/x:1")
    assert code == 1 and "Traceback" not in err
    assert f"{hostile}: member 'blobs/sha256' is a symbolic link (to '{outside}')" in err
    assert "nothing was loaded" in err and err.count("\n") == 1  # the one error line: nothing was installed or started
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(("entry", "why"), [
    (member("/etc/cron.d/x"), "is absolute or climbs out with `..`"),
    (member("blobs/../../x"), "is absolute or climbs out with `..`"),
    (member(f"blobs/sha256/{HEX}", tarfile.LNKTYPE, "index.json"), "is a hard link"),
    (member("blobs/null", tarfile.CHRTYPE), "is a character device"),
    (member("blobs/fifo", tarfile.FIFOTYPE), "is a named pipe"),
    (member("etc/passwd"), "is not part of an OCI image layout"),
    (member(f"blobs/sha256/{HEX}/x"), "is not part of an OCI image layout"),
    (member("blobs/sha256"), "is not part of an OCI image layout"),  # a file where the layout has a folder
    (member(f"blobs/sha256/{HEX}", tarfile.DIRTYPE), "is not part of an OCI image layout"),
    (member("index.json"), "appears twice"),
])
def test_an_oci_archive_holds_only_the_layouts_regular_files_and_folders(tmp_path, entry, why):
    hostile = write_tar(tmp_path / "hostile.tar", [*LAYOUT, entry])
    with pytest.raises(UserError) as err, archive.source(hostile):
        pass
    assert f"member {entry[0].name!r} {why}" in str(err.value)
    assert not list(Path(archive.tempfile.gettempdir()).glob(f"pytorchjob-kit-archive-*/{entry[0].name.lstrip('/')}"))


def test_an_archive_larger_than_the_limit_is_refused_naming_the_member_that_crosses_it(tmp_path):
    big = write_tar(tmp_path / "big.tar", [*LAYOUT, member(f"blobs/sha256/{HEX}", data=b"x" * 1000)])
    with pytest.raises(UserError, match=rf"member 'blobs/sha256/{HEX}' makes the archive larger than 500 bytes"), \
            archive.source(big, limit=500):
        pass


def test_an_oci_archive_is_unpacked_into_a_private_folder_that_goes_afterwards(tmp_path):
    image = oci.Image("localhost/pytorchjob-kit-test/hello:1", {"hello": (b"hi\n", 0o755)}, ("/hello",))
    path = oci.write(image, tmp_path / "hello.oci.tar")
    with tarfile.open(path) as tar:
        expected = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    with archive.source(path) as source:
        assert source.startswith("oci:")
        folder = Path(source.removeprefix("oci:"))
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == path.stat().st_uid
        assert {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == expected
    assert not folder.exists()


def test_a_docker_archive_is_read_in_place_and_keeps_only_links_inside_it(tmp_path):
    inside = [member("manifest.json", data=b"[]"), member(f"blobs/sha256/{HEX}"), member(f"{HEX}", tarfile.DIRTYPE),
              member(f"{HEX}/layer.tar", tarfile.SYMTYPE, f"../blobs/sha256/{HEX}")]
    saved = write_tar(tmp_path / "saved.tar", inside)
    with archive.source(saved) as source:
        assert source == f"docker-archive:{saved}"
    hostile = write_tar(tmp_path / "hostile.tar", [*inside[:3], member(f"{HEX}/layer.tar", tarfile.SYMTYPE,
                                                                          "../../../etc/shadow")])
    with pytest.raises(UserError, match=rf"member '{HEX}/layer.tar' is a symbolic link to '../../../etc/shadow', "
                                        "outside the archive"), archive.source(hostile):
        pass


def test_an_oci_archive_is_not_unpacked_into_a_temp_folder_others_may_write(tmp_path, monkeypatch):
    """There another user could rename the private folder away and put links in its place."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(archive.tempfile, "tempdir", None)  # read TMPDIR again, as a new process would
    image = oci.Image("localhost/pytorchjob-kit-test/hello:1", {"hello": (b"hi\n", 0o755)}, ("/hello",))
    path = oci.write(image, tmp_path / "hello.oci.tar")
    with pytest.raises(UserError, match=rf"{shared} is writable by other users \(mode 777\)"), \
            archive.source(path):
        pass
    assert list(shared.iterdir()) == []
