"""placeholder"""
from pathlib import Path
KIND = "bench-table"
def make(root: Path, args: list[str]) -> str:
    raise NotImplementedError
