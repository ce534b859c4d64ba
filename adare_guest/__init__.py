"""The pytest-adare guest agent: runs inside the VM and serves tool calls.

Only the standard library, :mod:`frame_codec` and ``pyserial`` are needed
(``pyautogui`` for the GUI tools, imported lazily). The WebSocket server is the
agent's own (:mod:`adare_guest.websocket.server`, standard library only).
"""

__version__ = "0.1.0"
