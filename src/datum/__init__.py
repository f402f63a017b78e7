"""Datum: converge hosts and control-plane resources to their desired state, and say where they stand."""

__version__ = "0.1.0"
