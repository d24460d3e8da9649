"""Running a plan: preflight (what stops a run before any namespace), the time
estimate, the rounds (runner), the validity and retry policy, and the progress shown."""
