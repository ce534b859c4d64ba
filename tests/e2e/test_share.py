"""A shared host folder on the built-in console image: mounted read-only before the test
starts, every file the guest user's (uid 1000), readable by others as on the host, writes
refused, still there after a restore of the ready state, left out of file-system
snapshots; the VM boots cold and says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare import launch

pytestmark = pytest.mark.e2e


def test_a_shared_folder_is_mounted_read_only_before_the_test(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "app.py").write_text("print('hello from the host')\n")
    (project / "README").write_text("shared\n")
    (project / "secret.key").write_text("the owner's\n")
    (project / "secret.key").chmod(0o600)  # only its host owner reads it
    manifest = image_under_test()
    lines: list[str] = []
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path / "vm", progress=lines.append,
        share={str(project): "/src"},
    ) as vm:  # fmt: skip
        names = [p.name for p in vm.phases]
        assert "warm" not in names and {"share", "mount"} <= set(names), lines
        assert any("warm: a shared folder" in line for line in lines), lines
        guest = vm.guest
        assert guest.succeed("python3 /src/pkg/app.py") == "hello from the host\n"
        assert guest.succeed("cat /src/README", run_as_user="nobody") == "shared\n"
        # Every file is the guest user's (uid 1000): it reads what the host's owner could.
        guest.succeed("grep -q '^[^:]*:[^:]*:1000:' /etc/passwd || adduser -D -H -u 1000 tester")
        user = guest.succeed("awk -F: '$3 == 1000 { print $1 }' /etc/passwd").strip()
        assert guest.succeed("stat -c '%u:%g %a' /src/secret.key") == "1000:1000 600\n"
        assert guest.succeed("cat /src/secret.key", run_as_user=user) == "the owner's\n"
        assert "Permission denied" in guest.fail("cat /src/secret.key", run_as_user="nobody").stderr
        refused = guest.fail("touch /src/new-file")
        assert "Read-only file system" in refused.stderr
        assert not (project / "new-file").exists()
        assert guest.aio.shared_paths == ("/src",)
        # Host data, not the scenario's: a snapshot leaves the share out unless asked.
        assert "/src/pkg/app.py" not in guest.fs_snapshot("/src").entries
        asked = guest.fs_snapshot("/src", include_shares=True).entries
        assert {"/src/pkg/app.py", "/src/README", "/src/secret.key"} <= set(asked)
        assert asked["/src/secret.key"].uid == 1000
        vm.save_ready()
        guest.succeed("touch /root/dirty")
        vm.restore_ready()
        assert guest.succeed("cat /src/README") == "shared\n"
