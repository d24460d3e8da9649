"""secperf: measure what network security costs."""

__version__ = "0.1.0"
