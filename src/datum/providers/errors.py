"""The one error a provider raises: below ``base`` so that ``fs`` (which ``base`` uses) can raise it too."""


class ProviderError(Exception):
    """A provider could not observe or apply; the message is what the pass line says."""
