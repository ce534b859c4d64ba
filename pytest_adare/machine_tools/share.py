"""A shared host folder as the guest sees it: a read-only ext4 disk made from the folder
when the VM starts, attached as a virtio disk with the serial ``adare-shareN`` and mounted
read-only in the guest before the test starts.

Why a disk, not 9p or virtiofs: the built-in images run Debian's cloud kernel, which has
no 9p at all (``CONFIG_NET_9P`` is not set), and a virtiofs device blocks QEMU's
``savevm`` (vhost-user devices cannot migrate), which per-test isolation needs. ext4 and
virtio-blk are in every image's kernel, and a read-only raw drive is left out of
``savevm`` as the cloud-init seed is. The price: the guest sees the folder as it was at
start (later host edits are not seen), read-only, with the host's modes.

Owners are mapped as a synced folder's are: every file belongs to the guest's user
(:data:`GUEST_OWNER`, uid and gid 1000: the built-in images' desktop user and the first
account a Debian install makes), so that user reads whatever the host's owner could,
and root reads everything. ``mkfs.ext4 -d`` copies the host's numbers; ``debugfs``
then sets each inode's owner in the new disk (never on the host).

Example::

    disk = build_share_disk(ShareSpec("/srv/project", "/src"), workdir / "share0.raw")
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from pytest_adare.errors import AdareError
from pytest_adare.host_access import ShareSpec

GUEST_OWNER = (1000, 1000)
"""The uid and gid every shared file has in the guest."""
MAX_SHARE_BYTES = 4 * 1024**3
"""A folder larger than this is refused (it is copied at every VM start)."""
_SLACK_BYTES = 32 * 1024**2
_MKFS_TIMEOUT = 300.0


class ShareError(AdareError):
    """A shared folder could not be made into the guest's disk (the message says why)."""


def share_serial(index: int) -> str:
    """The virtio serial of share ``index`` (the guest finds its disk by it)."""
    return f"adare-share{index}"


def _tree(root: Path) -> tuple[int, list[str]]:
    """The folder's size in bytes (with a block per entry) and its entries' paths, relative
    to the folder and starting with ``/`` (the folder itself first)."""
    total, paths = 0, ["/"]
    for directory, dirs, files in os.walk(root):
        for name in files + dirs:
            entry = os.path.join(directory, name)
            try:
                total += os.lstat(entry).st_size + 4096
            except OSError:
                continue
            paths.append("/" + os.path.relpath(entry, root))
        if total > MAX_SHARE_BYTES:
            raise ShareError(
                f"share {root}: more than {MAX_SHARE_BYTES // 1024**3} GiB; share a smaller folder"
            )
    return total, paths


def owner_commands(paths: list[str]) -> tuple[str, int]:
    """debugfs commands giving each path to :data:`GUEST_OWNER`, and how many paths it
    could not name (a ``"`` or a line break: debugfs has no quoting for them; those keep
    the host's owner)."""
    uid, gid = GUEST_OWNER
    lines, skipped = [], 0
    for path in paths:
        if '"' in path or "\n" in path or "\r" in path:
            skipped += 1
            continue
        lines += [f'sif "{path}" uid {uid}', f'sif "{path}" gid {gid}']
    return "\n".join(lines) + "\n", skipped


def _map_owners(spec: ShareSpec, path: Path, paths: list[str]) -> None:
    commands, _ = owner_commands(paths)
    script = path.with_suffix(".owners")
    script.write_text(commands)
    try:
        done = subprocess.run(
            ["debugfs", "-w", "-f", str(script), str(path)],
            capture_output=True, text=True, timeout=_MKFS_TIMEOUT,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ShareError(f"share {spec.host}: debugfs could not set the owners: {error}") from error
    finally:
        script.unlink(missing_ok=True)
    # debugfs reports a bad command on stderr and still exits 0: its words are the verdict.
    errors = [line for line in done.stderr.splitlines() if not line.startswith("debugfs ")]
    if done.returncode != 0 or errors:
        said = "\n".join(errors or [done.stdout.strip()])[-500:]
        raise ShareError(f"share {spec.host}: debugfs could not set the owners: {said}")


def build_share_disk(spec: ShareSpec, path: Path) -> Path:
    """``spec``'s host folder as a raw ext4 image at ``path`` (``mkfs.ext4 -d``).

    :raise ShareError: the folder is too large, or mkfs.ext4 failed (its words).
    """
    root = Path(spec.host)
    if not root.is_dir():
        raise ShareError(f"share: the host path {spec.host!r} is not a directory (any more)")
    total, paths = _tree(root)
    size = int((total * 1.2 + _SLACK_BYTES) // 4096 * 4096)
    path.unlink(missing_ok=True)
    with path.open("wb") as disk:
        disk.truncate(size)
    # No journal: the guest mounts it read-only, and nothing is ever replayed.
    command = ["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-L", "adare-share",
               "-d", str(root), str(path)]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_MKFS_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ShareError(f"share {spec.host}: {shlex.join(command)} failed: {error}") from error
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-500:]
        raise ShareError(f"share {spec.host}: mkfs.ext4 could not copy the folder: {said}")
    _map_owners(spec, path, paths)
    return path


def mount_command(spec: ShareSpec, index: int) -> str:
    """The guest shell command mounting share ``index`` read-only at ``spec.guest``."""
    serial, target = share_serial(index), shlex.quote(spec.guest)
    return (
        f'dev=; for b in /sys/block/vd*; do [ "$(cat $b/serial 2>/dev/null)" = {serial} ] '
        f'&& dev=/dev/${{b##*/}}; done; [ -n "$dev" ] || {{ echo no disk {serial}; exit 3; }}; '
        f'mkdir -p {target} && mount -t ext4 -o ro,nodev,nosuid "$dev" {target}'
    )
