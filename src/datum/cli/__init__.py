"""The ``datum`` command: thin commands over the layers below, with no logic of their own."""
