"""What the scenario file is made of: value types (units, fields), the [testbed] and
[topology] sections, and the kind registry. Each kind's model is built from these in
its own module; secperf.scenario assembles the whole file."""
