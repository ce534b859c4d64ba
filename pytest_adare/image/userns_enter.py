"""Run ``argv`` as root of a new user namespace (a script, run with ``python -I``).

Usage: ``python -I userns_enter.py [--die-with-parent=PID] UID_MAP GID_MAP ARGV...``
where each map is the ``newuidmap`` / ``newgidmap`` argument list (``inner outer count
...``) as one string. ``--die-with-parent=PID``: ``argv`` gets SIGKILL when its parent,
process PID, ends (set after the id change, which clears an earlier one; PID is given,
not read here, so a parent gone before this script runs is noticed).

The dance is mmdebstrap's: a process cannot map ids into its own namespace (only the
setuid ``newuidmap`` can map subordinate ids), so a forked child waits until this
process has called ``unshare(CLONE_NEWUSER)``, maps it from outside and exits; this
process then becomes uid 0 *before* ``execve`` (capabilities in the namespace survive an
exec only as uid 0). Standard library only: it runs before anything is importable.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

CLONE_NEWUSER = 0x10000000
PR_SET_PDEATHSIG = 1
FAILED = 125


def _map_parent(parent: int, uid_map: str, gid_map: str) -> int:
    if os.geteuid() == 0:  # root maps any ids itself; newuidmap would ask /etc/subuid
        for kind, ids in (("uid", uid_map), ("gid", gid_map)):
            numbers = ids.split()
            rows = "".join(" ".join(numbers[i : i + 3]) + "\n" for i in range(0, len(numbers), 3))
            try:
                with open(f"/proc/{parent}/{kind}_map", "w") as handle:
                    handle.write(rows)
            except OSError:
                return FAILED
        return 0
    for tool, ids in (("newuidmap", uid_map), ("newgidmap", gid_map)):
        done = subprocess.run([tool, str(parent), *ids.split()], check=False)
        if done.returncode != 0:
            return FAILED
    return 0


def main(args: list[str]) -> int:
    parent = None
    if args and args[0].startswith("--die-with-parent="):
        parent = int(args[0].split("=", 1)[1])
        args = args[1:]
    uid_map, gid_map, argv = args[0], args[1], args[2:]
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(write_end)
        os.read(read_end, 1)  # EOF: the parent has unshared
        os._exit(_map_parent(os.getppid(), uid_map, gid_map))
    os.close(read_end)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER) != 0:
        error = ctypes.get_errno()
        os.close(write_end)
        os.waitpid(child, 0)
        print(f"adare: unshare(CLONE_NEWUSER) failed: {os.strerror(error)}", file=sys.stderr)
        return FAILED
    os.close(write_end)
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        print("adare: newuidmap/newgidmap could not map the subordinate ids", file=sys.stderr)
        return FAILED
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    if parent is not None:
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
            return FAILED  # the parent is gone already: nobody would end argv
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
