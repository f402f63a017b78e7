"""The host agent: manifests, the pass executor, host state and reboots."""
