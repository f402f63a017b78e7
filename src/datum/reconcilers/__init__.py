"""The reconcilers that ship with Datum, each a plugin in its own directory written only against ``datum.sdk``.

They are found like any installed plugin, through the ``datum.reconcilers``
entry points Datum's own ``pyproject.toml`` declares (``datum.plugins``).
"""
