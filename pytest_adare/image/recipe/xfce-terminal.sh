#!/bin/sh
# debian-xfce's autostarted terminal, started once xfwm4 manages the screen. The session
# starts its autostart entries beside the window manager; under load a terminal mapped
# before xfwm4 took over would be adopted without the keyboard focus, which would stay
# on xfwm4's own window (the desktop's ready state waits for a focused application).
python3 - <<'ADARE_EOF'
import time
from Xlib import X, display
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        d = display.Display()
        check = d.intern_atom("_NET_SUPPORTING_WM_CHECK")
        if d.screen().root.get_full_property(check, X.AnyPropertyType):
            break
        d.close()
    except Exception:
        pass
    time.sleep(0.2)
ADARE_EOF
exec xfce4-terminal --geometry=100x30+40+40
