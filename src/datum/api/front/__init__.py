"""The front door: what every HTTP request meets before its route, and the state it is served from.

``edge`` (HEAD, trailing slashes, the last 500), ``guard`` (one admission per
request: the principal, Cedar's decision, the body's bounds, the fast
answers), ``security`` and ``authz`` (who asks and what they may do),
``tokens`` (bearer tokens), ``gate`` (the read slots), ``errors`` and
``handlers`` (every error body, written by one function), and ``state``
(the one object the routes read).
"""
