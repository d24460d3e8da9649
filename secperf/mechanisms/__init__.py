"""Mechanisms: what the DUT does to traffic, one module a kind.

The package imports nothing: importing one mechanism (or a workload that asks a
mechanism something) never imports the scenario schema. `build.from_schema` turns
a scenario's mechanism entry into its runtime object.
"""
