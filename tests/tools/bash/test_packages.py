"""The host's package manager: from /etc/os-release's distribution, else the first known one on
PATH; named in one line of bash's description. Real executables in temp PATH directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemode.tools.bash import find_package_manager, os_release
from codemode.tools.bash._tool import description


def path_with(tmp_path: Path, *names: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return {"PATH": str(bin_dir)}


@pytest.mark.parametrize(
    ("release", "on_path", "argv"),
    [
        ({"ID": "debian"}, ("apt-get", "dnf"), ("sudo", "apt-get", "install", "-y", "PKG")),
        (
            {"ID": "rocky", "ID_LIKE": "rhel centos fedora"},
            ("apt-get", "dnf"),
            ("sudo", "dnf", "install", "-y", "PKG"),
        ),
        ({"ID": "centos"}, ("yum",), ("sudo", "yum", "install", "-y", "PKG")),  # an older release
        ({"ID": "arch"}, ("pacman",), ("sudo", "pacman", "-S", "--noconfirm", "PKG")),
        ({"ID": "alpine"}, ("apk",), ("sudo", "apk", "add", "PKG")),
        ({}, ("pacman", "apk"), ("sudo", "pacman", "-S", "--noconfirm", "PKG")),  # no os-release: PATH order
        ({"ID": "debian"}, ("brew",), ("brew", "install", "PKG")),  # named, not installed: the next found
    ],
)
def test_the_manager_comes_from_the_distribution_else_from_path(
    tmp_path: Path, release: dict[str, str], on_path: tuple[str, ...], argv: tuple[str, ...]
) -> None:
    manager = find_package_manager(path_with(tmp_path, *on_path), release)
    assert manager is not None and manager.argv == argv


def test_homebrew_installs_unsandboxed_never_with_sudo(tmp_path: Path) -> None:
    manager = find_package_manager(path_with(tmp_path, "brew"), {"ID": "ubuntu"})
    assert manager is not None and manager.unsandboxed
    assert manager.describe() == 'Install packages: argv ["brew","install",PKG], sandbox: false.'


def test_no_manager_no_line(tmp_path: Path) -> None:
    assert find_package_manager(path_with(tmp_path), {"ID": "debian"}) is None
    assert "Install packages" not in description(10.0, None)


def test_the_line_ends_bash_description(tmp_path: Path) -> None:
    manager = find_package_manager(path_with(tmp_path, "apt-get"), {"ID": "debian"})
    assert manager is not None
    text = description(10.0, manager.describe())
    assert text.endswith(' Install packages: argv ["sudo","apt-get","install","-y",PKG].')


def test_os_release_is_read_as_the_os_reports_it(tmp_path: Path) -> None:
    (tmp_path / "os-release").write_text('NAME="Debian GNU/Linux"\nID=debian\n# a comment\nbroken line\n')
    assert os_release(str(tmp_path / "os-release")) == {"NAME": "Debian GNU/Linux", "ID": "debian"}
    assert os_release(str(tmp_path / "missing")) == {}
