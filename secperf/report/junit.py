"""JUnit XML (the schema Jenkins, GitLab and GitHub's test reporters read), for every
gate: a testsuite named after the scenario, a testcase per check, a <failure> for each
failed one. The gates say what their cases are (JunitCase); this writes them."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from secperf.errors import SecperfError


@dataclass(frozen=True)
class JunitCase:
    classname: str
    name: str
    failure: str | None = None  # the failure's type ("threshold", "history", ...); None: passed
    message: str = ""
    detail: str = ""  # the failure's text (default: the message)
    note: str | None = None  # system-out of a case that passed with a remark (inconclusive)


def junit_xml(cases: Sequence[JunitCase], suite: str, properties: Mapping[str, str]) -> bytes:
    failures = sum(c.failure is not None for c in cases)
    root = ET.Element("testsuites", name="secperf", tests=str(len(cases)))
    root.set("failures", str(failures))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)))
    ts.set("failures", str(failures))
    ts.set("errors", "0")
    ts.set("skipped", "0")
    props = ET.SubElement(ts, "properties")
    for name, value in properties.items():
        ET.SubElement(props, "property", name=name, value=value)
    for c in cases:
        case = ET.SubElement(ts, "testcase", classname=c.classname, name=c.name)
        case.set("time", "0")
        if c.failure is not None:
            failure = ET.SubElement(case, "failure", type=c.failure)
            failure.set("message", c.message)
            failure.text = c.detail or c.message
        elif c.note is not None:
            ET.SubElement(case, "system-out").text = c.note
    ET.indent(root)
    text: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return text + b"\n"


def write_junit_file(
    path: Path, cases: Sequence[JunitCase], suite: str, properties: Mapping[str, str]
) -> None:
    """Write the file; a path that cannot be written is an error that says so."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(junit_xml(cases, suite, properties))
    except OSError as exc:
        raise SecperfError(
            f"cannot write the JUnit file: {exc.strerror or exc}",
            where=str(path),
            fix="give --junit a path you may write",
        ) from None
