"""python -m secperf: the same CLI as the secperf command."""

from secperf.cli import main

main()
