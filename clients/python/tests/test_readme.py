"""The README snippets run as written against the tour's server: the
Python blocks of clients/python/README.md ("Use") and of the top-level
README ("Clients in Go, Python and TypeScript"), each in a fresh
interpreter, against ``httpcrypt serve`` started as the tour starts it
(no mount); only the port and the pinned identity are put in."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .live import REPO, Server, binary, free_port, keygen, start

PAGE = "<h1>hello from the tour</h1>"
IDENTITY = re.compile(r'(identity|IDENTITY) = "[A-Za-z0-9_-]{43}"')


def _blocks(readme: Path, heading: str) -> list[str]:
    """The ```python blocks of the section under ``heading``."""
    text = readme.read_text()
    start = text.index("\n" + heading + "\n")
    end = text.find("\n## ", start + len(heading) + 2)
    section = text[start:end if end >= 0 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


SNIPPETS = [
    (REPO / "clients" / "python" / "README.md", "## Use", 0),
    (REPO / "clients" / "python" / "README.md", "## Use", 1),
    (REPO / "README.md", "## Clients in Go, Python and TypeScript", 0),
]


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    bin_ = binary()
    d = tmp_path_factory.mktemp("tour")
    (d / "site").mkdir()
    (d / "site" / "index.html").write_text(PAGE + "\n")
    ident = keygen(bin_, d / "keys")
    s = start(bin_, ["serve", "--keys", str(d / "keys"), "--root", str(d / "site"),
                     "--rotation", "3600"], ident, free_port(), d / "serve.log")
    yield s
    s.stop()


@pytest.mark.parametrize(("readme", "heading", "index"), SNIPPETS,
                         ids=["python-httpx", "python-requests", "top-level"])
def test_snippet_runs_against_the_tour(tour: Server, readme: Path, heading: str,
                                       index: int) -> None:
    code = _blocks(readme, heading)[index]
    assert "127.0.0.1:8080" in code, "the snippet should fetch from the tour's server"
    code = code.replace("127.0.0.1:8080", f"127.0.0.1:{tour.port}")
    code = IDENTITY.sub(lambda m: f'{m.group(1)} = "{tour.identity}"', code)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == PAGE
