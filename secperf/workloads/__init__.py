"""Workloads: what the endpoints do, one module (or package) a kind.

Each kind declares itself once in its module (`KIND`, secperf.workloads.base.WorkloadKind);
secperf.workloads.registry lists them. Importing one kind imports no other.
"""
