"""Mechanisms: what the DUT does to traffic. One module (or package) per kind, each
declaring itself once (`KIND`); secperf.mechanisms.registry lists them, and
secperf.mechanisms.base says what every kind and every runtime is."""
