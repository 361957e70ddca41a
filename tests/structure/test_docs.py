"""The README's quick start and the package docstring run as written; the README's links stay in
the repository, and the site's home page gives its set-up commands."""

import doctest
import pathlib
import re

import kquota

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_quick_start_runs():
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    qm, Q = ns["qm"], ns["Q"]
    assert ns["throttle_ms"] == 0
    assert qm.quota_metric_tags(Q.PRODUCE, "alice", "app-1") == {"user": "alice", "client-id": ""}
    assert qm.quota_limit(Q.FETCH, "bob", "x") == 2_000_000.0


def test_package_docstring_examples():
    result = doctest.testmod(kquota)
    assert result.attempted > 0 and result.failed == 0


def test_readme_links_resolve_inside_the_repository():
    """Every relative link of the README names a file of the repository (the docs pages moved
    out of it included), and none leaves it."""
    text = README.read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10
    root = README.parent
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target = (root / link).resolve()
        assert target.is_relative_to(root) and target.exists(), link


def test_docs_home_repeats_the_readme_setup_commands():
    """The site's home page gives the same two set-up commands as the README."""
    def commands(text, heading):
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        return re.findall(r"```sh\n(.*?)\n```", section, re.S)

    home = (README.parent / "docs" / "index.md").read_text()
    assert commands(home, "## Set-up\n") == commands(README.read_text(), "## Set-up (fresh machine)\n")
