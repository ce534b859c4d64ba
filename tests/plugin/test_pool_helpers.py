"""Pure helpers of the plugin: artifact directory names and the keep hint's command line."""

from __future__ import annotations

from pytest_adare.plugin.fixtures import sanitise_nodeid
from pytest_adare.plugin.pool import argv_without_qmp_client


def test_nodeids_become_safe_directory_names() -> None:
    assert sanitise_nodeid("tests/test_x.py::test_y[a/b-1]") == "tests_test_x.py_test_y_a_b-1"
    assert sanitise_nodeid("::") == "test"
    assert len(sanitise_nodeid("a" * 500)) == 200


def test_keep_hint_drops_only_the_qmp_client_socket() -> None:
    argv = [
        "qemu-system-x86_64",
        "-chardev", "socket,id=qga,path=/s/qga.sock,server=on,wait=off",
        "-chardev", "socket,id=qmp,path=/s/qmp.sock,server=off",
        "-mon", "chardev=qmp,mode=control",
        "-vga", "std",
    ]  # fmt: skip
    assert argv_without_qmp_client(argv) == [
        "qemu-system-x86_64",
        "-chardev", "socket,id=qga,path=/s/qga.sock,server=on,wait=off",
        "-vga", "std",
    ]  # fmt: skip
