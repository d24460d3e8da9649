"""Real servers secperf starts inside a testbed host (nginx, …), each in the foreground."""
