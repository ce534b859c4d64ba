"""adare experiments (a folder with ``playbook.yml``) run by pytest-adare.

The package reads a playbook into typed steps (:mod:`.source`, :mod:`.schema`), fills
in its templates in a sandbox (:mod:`.templating`, :mod:`.variables`), and runs it on
a guest (:mod:`.runner`, :mod:`.actions`, :mod:`.targets`), recording every step
(:mod:`.results`). :mod:`.collect` makes pytest items of experiment folders; the
plugin imports it only when a ``playbook.yml`` is collected. Nothing here imports the
guest facade: the runner drives any object with its methods
(:class:`~pytest_adare.playbook.guest_api.PlaybookGuest`).
"""
