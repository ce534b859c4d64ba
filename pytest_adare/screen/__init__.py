"""The guest's screen as the host reads it: template matching (:mod:`.match`), text by
OCR (:mod:`.text`) and the wait on a changing screen both share (:mod:`.wait`).

Nothing here talks to a guest: each function takes screenshots (PIL images) or a
function that takes one.
"""
