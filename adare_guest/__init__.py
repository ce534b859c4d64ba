"""The pytest-adare guest agent: runs inside the VM and serves tool calls.

Only the standard library, :mod:`frame_codec`, ``websockets`` and ``pyserial`` are
needed (``pyautogui`` for the GUI tools, imported lazily).
"""

__version__ = "0.1.0"
