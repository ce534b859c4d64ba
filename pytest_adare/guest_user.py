"""``guest.user``: the person at the guest's keyboard, and programs run in their session.

On the built-in desktop image that is ``user`` (uid 1000, ``/home/user``), whose X
session the image starts with a D-Bus session bus, ``XDG_RUNTIME_DIR`` and a UTF-8
locale and describes in ``/run/adare/session.env``; on another image it is the
manifest's ``user``, else the user whose session that file describes, else root::

    user = guest.user
    user.documents                          # '/home/user/Documents'
    user.run("gio trash ~/Documents/a.txt").check()   # in the session's environment
    editor = user.start("mousepad notes.txt")         # detached, in the session
    assert editor.running()
    editor.stop()

It is written over the facade's ``shell`` (passed in), so it does not import the
facade: ``AsyncGuestUser[R]`` returns whatever that ``shell`` returns.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

from adare_guest.tool_names import EXECUTE_SHELL
from pytest_adare.errors import ToolError
from pytest_adare.loop_thread import SyncTwin, sync_twin

SESSION_ENV = "/run/adare/session.env"
XDG_DIRS = ("DESKTOP", "DOCUMENTS", "DOWNLOAD", "MUSIC", "PICTURES", "PUBLICSHARE",
            "TEMPLATES", "VIDEOS")  # fmt: skip
_DEFAULT_DIRS = {"DOWNLOAD": "Downloads", "PUBLICSHARE": "Public"}
STOP_TIMEOUT = 5.0

# Runs in the guest (python3 is there: the agent needs it). Argument: the user's name
# or "" (then the session's user, else root). Prints one JSON object.
USER_SCRIPT = r"""
import json, os, pwd, re, sys
session = {}
try:
    for line in open(sys.argv[2]):
        key, sep, value = line.rstrip("\n").partition("=")
        if sep:
            session[key] = value
except OSError:
    pass
name = sys.argv[1] or session.get("USER") or "root"
entry = pwd.getpwnam(name)
home = entry.pw_dir
dirs = {}
try:
    for line in open(os.path.join(home, ".config", "user-dirs.dirs")):
        m = re.match(r'XDG_(\w+)_DIR="(.*)"\s*$', line)
        if m:
            dirs[m.group(1)] = m.group(2).replace("$HOME", home)
except OSError:
    pass
if session.get("USER") == name:
    env = session
else:
    env = {"HOME": home, "USER": name, "LOGNAME": name, "LANG": "C.UTF-8"}
    runtime = "/run/user/%d" % entry.pw_uid
    if os.path.isdir(runtime):
        env["XDG_RUNTIME_DIR"] = runtime
print(json.dumps({"name": name, "uid": entry.pw_uid, "gid": entry.pw_gid, "home": home,
                  "dirs": dirs, "env": env}))
"""


# Runs in the guest as root: every logind session, one `loginctl show-session` block each
# (blank line between). Exit 3: no logind (no systemd).
SESSIONS_SCRIPT = (
    "command -v loginctl >/dev/null && [ -d /run/systemd/system ] || exit 3; "
    "for id in $(loginctl list-sessions --no-legend | awk '{print $1}'); do "
    'block=$(loginctl show-session "$id" -p Id -p Name -p User -p Type -p Class -p Seat '
    '-p State -p Remote -p Service -p Display -p Leader -p Timestamp); echo "$block"; '
    """echo "Epoch=$(date -d "$(echo "$block" | sed -n 's/^Timestamp=//p')" +%s)"; """
    "echo; done"
)
NO_LOGIND = 3
MAX_SESSIONS = 256


@dataclass(frozen=True)
class LoginSession:
    """A logind session (``loginctl show-session``): who, how and where."""

    id: str
    user: str
    uid: int
    type: str
    """``x11``, ``wayland``, ``tty``, ``unspecified`` (a PAM session without a terminal)."""
    session_class: str
    """``user``, ``greeter``, ``lock-screen``, ``background``."""
    seat: str
    """``seat0`` for the machine's own screen and keyboard; empty for none (ssh, cron)."""
    state: str
    remote: bool
    service: str
    """The PAM service that opened it (``lightdm-autologin``, ``login``, ``sshd``)."""
    display: str
    leader: int
    started: datetime | None
    """When logind opened it (its ``Timestamp``, read by the guest's ``date``); None if
    the guest's ``date`` could not read it."""


def _epoch(text: str) -> datetime | None:
    """Epoch seconds as an aware UTC time; None for anything else."""
    if not text.isdigit() or len(text) > 12:
        return None
    return datetime.fromtimestamp(int(text), timezone.utc)


def parse_login_sessions(text: str) -> list[LoginSession]:
    """:data:`SESSIONS_SCRIPT`'s output as sessions.

    :raise ValueError: a block lacks a field, or there are more than :data:`MAX_SESSIONS`.
    """
    sessions: list[LoginSession] = []
    for block in text.split("\n\n"):
        pairs = (line.partition("=") for line in block.splitlines())
        fields = {key: value for key, sep, value in pairs if sep}
        if not fields:
            continue
        if len(sessions) == MAX_SESSIONS:
            raise ValueError(f"more than {MAX_SESSIONS} logind sessions")
        try:
            sessions.append(
                LoginSession(
                    id=fields["Id"],
                    user=fields["Name"],
                    uid=int(fields["User"]),
                    type=fields["Type"],
                    session_class=fields["Class"],
                    seat=fields.get("Seat", ""),
                    state=fields["State"],
                    remote=fields.get("Remote") == "yes",
                    service=fields.get("Service", ""),
                    display=fields.get("Display", ""),
                    leader=int(fields.get("Leader") or 0),
                    started=_epoch(fields.get("Epoch", "")),
                )
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a logind session: {block[:200]!r} ({exc})") from None
    return sessions


class ShellOutcome(Protocol):
    """What this module reads of the facade's ``ShellResult``."""

    @property
    def returncode(self) -> int: ...
    @property
    def stdout(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def stdout_path(self) -> str | None: ...


R = TypeVar("R", bound=ShellOutcome)
Shell = Callable[..., Awaitable[R]]


@dataclass(frozen=True)
class UserInfo:
    """Who the user is: name, ids, home, XDG user directories, session environment."""

    name: str
    uid: int
    gid: int
    home: str
    dirs: Mapping[str, str]
    env: Mapping[str, str]

    @classmethod
    def from_json(cls, text: str) -> UserInfo:
        """Read :data:`USER_SCRIPT`'s output; XDG directories the user has not set get
        their usual place under the home directory."""
        data = json.loads(text)
        home = str(data["home"])
        dirs = {name: f"{home}/{_DEFAULT_DIRS.get(name, name.capitalize())}" for name in XDG_DIRS}
        dirs.update({str(k): str(v) for k, v in data["dirs"].items()})
        return cls(
            name=str(data["name"]),
            uid=int(data["uid"]),
            gid=int(data["gid"]),
            home=home,
            dirs=MappingProxyType(dirs),
            env=MappingProxyType({str(k): str(v) for k, v in data["env"].items()}),
        )


class AsyncGuestUser(Generic[R]):
    """The guest's user over the facade's ``shell``; :meth:`info` is read once."""

    def __init__(self, shell: Shell[R], name: str | None = None) -> None:
        self._shell = shell
        self._name = name
        self._info: UserInfo | None = None

    async def info(self) -> UserInfo:
        """Name, uid, home, XDG directories and session environment (asked once).

        :raise ToolError: the guest has no such user.
        """
        if self._info is None:
            argv = ["python3", "-c", USER_SCRIPT, self._name or "", SESSION_ENV]
            found = await self._shell(shlex.join(argv), timeout=30)
            if found.returncode != 0:
                raise ToolError(
                    EXECUTE_SHELL, f"cannot look up the guest's user {self._name or ''!r}", {}
                )
            self._info = UserInfo.from_json(found.stdout)
        return self._info

    async def session(self) -> LoginSession | None:
        """The user's logind session (class ``user``; the one on a seat first, then the
        active one), or None while they have none.

        :raise ToolError: the guest runs no logind (not a systemd image: use
            ``debian-systemd`` or ``debian-xfce``), or its answer is not logind's.
        """
        info = await self.info()
        found = await self._shell(SESSIONS_SCRIPT, timeout=30)
        if found.returncode == NO_LOGIND:
            raise ToolError(
                EXECUTE_SHELL,
                "guest.user.session: the guest runs no logind (it has no systemd; the "
                "built-in debian-systemd and debian-xfce do)",
                {},
            )
        if found.returncode != 0:
            raise ToolError(EXECUTE_SHELL, "loginctl failed listing the guest's sessions", {})
        try:
            sessions = parse_login_sessions(found.stdout)
        except ValueError as exc:
            raise ToolError(EXECUTE_SHELL, f"guest.user.session: {exc}", {}) from None
        mine = [s for s in sessions if s.uid == info.uid and s.session_class == "user"]
        mine.sort(key=lambda s: (not s.seat, s.state != "active", s.id))
        return mine[0] if mine else None

    def _options(self, info: UserInfo, options: dict[str, Any]) -> dict[str, Any]:
        env = {**info.env, **(options.pop("env", None) or {})}
        options.setdefault("cwd", info.home)
        if info.uid != 0:
            options.setdefault("run_as_user", info.name)
        return {"env": env, **options}

    async def run(self, command: str, /, **shell_options: Any) -> R:
        """Run ``command`` as the user in their session's environment (``DISPLAY``,
        ``DBUS_SESSION_BUS_ADDRESS``, ``XDG_RUNTIME_DIR``, ``HOME``, ``LANG``), in their
        home unless ``cwd`` says otherwise; ``shell_options`` as for ``guest.shell``."""
        info = await self.info()
        return await self._shell(command, **self._options(info, dict(shell_options)))

    async def start(self, command: str, /, **shell_options: Any) -> AsyncUserProgram[R]:
        """Start ``command`` detached in the user's session; returns a handle on it."""
        info = await self.info()
        options = self._options(info, dict(shell_options))
        started = await self._shell(command, background=True, **options)
        if started.pid is None or started.stdout_path is None:
            raise ToolError(EXECUTE_SHELL, f"{command!r} did not start in the background", {})
        return AsyncUserProgram(self._shell, command, started.pid, started.stdout_path)


class AsyncUserProgram(Generic[R]):
    """A program :meth:`AsyncGuestUser.start` started: ``pid``, its ``output_path``."""

    def __init__(self, shell: Shell[R], command: str, pid: int, output_path: str) -> None:
        self._shell = shell
        self.command = command
        self.pid = pid
        self.output_path = output_path
        """The guest file its standard output goes to."""

    async def running(self) -> bool:
        """True while the program has not exited."""
        probe = await self._shell(f"kill -0 {self.pid} 2>/dev/null", timeout=30)
        return probe.returncode == 0

    async def output(self) -> str:
        """What it has written to its standard output so far."""
        return (await self._shell(f"cat {shlex.quote(self.output_path)}", timeout=30)).stdout

    async def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns once it is gone."""
        tries = max(1, int(timeout * 10))
        await self._shell(
            f"kill {self.pid} 2>/dev/null; i=0; while kill -0 {self.pid} 2>/dev/null && "
            f"[ $i -lt {tries} ]; do sleep 0.1; i=$((i+1)); done; kill -9 {self.pid} 2>/dev/null;"
            " true",
            timeout=timeout + 30,
        )


class GuestUser(SyncTwin[AsyncGuestUser[Any]]):
    """The sync twin of :class:`AsyncGuestUser` (``guest.user`` of the sync ``Guest``)."""

    def __init__(self, aio: AsyncGuestUser[Any]) -> None:
        self.aio = aio

    info = sync_twin(AsyncGuestUser.info)
    run = sync_twin(AsyncGuestUser.run)
    session = sync_twin(AsyncGuestUser.session)

    def start(self, command: str, /, **shell_options: Any) -> UserProgram:
        """Start ``command`` detached in the user's session; returns a handle on it."""
        return UserProgram(sync_twin(AsyncGuestUser.start)(self, command, **shell_options))

    @property
    def name(self) -> str:
        """The user's login name."""
        return self.info().name

    @property
    def uid(self) -> int:
        """The user's numeric id."""
        return self.info().uid

    @property
    def home(self) -> str:
        """The user's home directory."""
        return self.info().home

    @property
    def dirs(self) -> Mapping[str, str]:
        """XDG user directories by name (``DESKTOP``, ``DOCUMENTS``, ``DOWNLOAD``, ...)."""
        return self.info().dirs

    @property
    def desktop(self) -> str:
        """``XDG_DESKTOP_DIR``."""
        return self.dirs["DESKTOP"]

    @property
    def documents(self) -> str:
        """``XDG_DOCUMENTS_DIR``."""
        return self.dirs["DOCUMENTS"]

    @property
    def downloads(self) -> str:
        """``XDG_DOWNLOAD_DIR``."""
        return self.dirs["DOWNLOAD"]


class UserProgram(SyncTwin[AsyncUserProgram[Any]]):
    """The sync twin of :class:`AsyncUserProgram`."""

    def __init__(self, aio: AsyncUserProgram[Any]) -> None:
        self.aio = aio
        self.pid = aio.pid
        self.command = aio.command
        self.output_path = aio.output_path

    running = sync_twin(AsyncUserProgram.running)
    output = sync_twin(AsyncUserProgram.output)
    stop = sync_twin(AsyncUserProgram.stop)
