"""Run ``argv`` as root of a new user namespace (a script, run with ``python -I``).

Usage: ``python -I userns_enter.py UID_MAP GID_MAP ARGV...`` where each map is the
``newuidmap`` / ``newgidmap`` argument list (``inner outer count ...``) as one string.

The dance is mmdebstrap's: a process cannot map ids into its own namespace (only the
setuid ``newuidmap`` can map subordinate ids), so a forked child waits until this
process has called ``unshare(CLONE_NEWUSER)``, maps it from outside and exits; this
process then becomes uid 0 *before* ``execve`` (capabilities in the namespace survive an
exec only as uid 0). Standard library only: it runs before anything is importable.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

CLONE_NEWUSER = 0x10000000
FAILED = 125


def _map_parent(parent: int, uid_map: str, gid_map: str) -> int:
    for tool, ids in (("newuidmap", uid_map), ("newgidmap", gid_map)):
        done = subprocess.run([tool, str(parent), *ids.split()], check=False)
        if done.returncode != 0:
            return FAILED
    return 0


def main(args: list[str]) -> int:
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
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
