"""The server's side of hosts: node classification, effective manifests, and how stale a host is."""
