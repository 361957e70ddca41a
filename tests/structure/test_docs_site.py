"""The documentation site builds (``mkdocs build --strict``: no broken link, page or docstring),
offline, and renders what a reader needs: every page in the navigation, code blocks, and the API
reference from the docstrings and from the native module's stub. Nothing in the repository sends
a reader outside it (the old ``../shared/spec`` pages are the site's own now).

scripts/test.sh builds the site once and passes it in ``KQUOTA_DOCS_SITE``; run alone, the test
builds it into a temporary directory.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MKDOCS_YML = (ROOT / "mkdocs.yml").read_text()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
    given = os.environ.get("KQUOTA_DOCS_SITE")
    if given and (pathlib.Path(given) / "index.html").exists():
        return pathlib.Path(given)
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def _page(site: pathlib.Path, md: str) -> str:
    rel = pathlib.PurePosixPath(md)
    html = site / "index.html" if md == "index.md" else site / rel.with_suffix("") / "index.html"
    return html.read_text(encoding="utf-8")


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_every_page_is_in_the_navigation_and_built(site):
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    in_nav = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", MKDOCS_YML, re.M))
    assert set(pages) == in_nav, f"pages not in mkdocs.yml's nav: {set(pages) - in_nav}; gone: {in_nav - set(pages)}"
    for md in pages:
        assert "md-nav" in _page(site, md), md


def test_the_build_fetches_nothing_and_the_pages_load_nothing_remote(site):
    # Only local plugins: Material's `social` and `privacy` plugins download at build time.
    plugins = re.search(r"^plugins:\n((?:[ -].*\n)+)", MKDOCS_YML, re.M).group(1)
    names = set(re.findall(r"^  - ([\w-]+)", plugins, re.M))
    assert names == {"search", "mkdocstrings"}, names
    assert re.search(r"^  font: false$", MKDOCS_YML, re.M), "the theme must not load web fonts"
    remote = re.compile(r'<(?:link|script|img)\b[^>]*\b(?:href|src)="(?:https?:)?//', re.I)
    loading = [p.relative_to(site).as_posix() for p in site.rglob("*.html") if remote.search(p.read_text())]
    assert not loading, f"pages that load a remote resource: {loading}"


def test_api_reference_renders_the_docstrings(site):
    kquota_ref = _text(_page(site, "reference/kquota.md"))
    for name in ("QuotaManager", "alter_client_quotas", "describe_client_quotas", "ClientQuotaEntity",
                 "ThrottlingQuotaExceededError", "callback_failure"):
        assert name in kquota_ref, name
    assert ":class:" not in kquota_ref and ":meth:" not in kquota_ref  # reST roles rewritten
    assert "ThrottledConnection" in _text(_page(site, "reference/aio.md"))
    assert "response_throttle" in _text(_page(site, "reference/response.md"))
    assert "load_quota_config" in _text(_page(site, "reference/config_file.md"))
    assert "open_store" in _text(_page(site, "reference/stores.md"))
    assert "QuotaConfigWatcher" in _text(_page(site, "reference/watcher.md"))
    assert "QuotaGroupsCallback" in _text(_page(site, "reference/plugins.md"))
    assert "ProxyServer" in _text(_page(site, "reference/proxy.md"))


def test_api_reference_renders_the_native_stub(site):
    native = _text(_page(site, "reference/native.md"))
    # Names that exist only in python/kquota/_kquota.pyi, with their stub docstrings.
    for name in ("QuotaKernel", "ClientHandle", "peek_throttle_time_ms", "record_controller_mutations",
                 "fetch_answer", "ProxyDataPlane", "Per-connection handle"):
        assert name in native, name


def test_code_blocks_are_highlighted(site):
    for md in ("index.md", "guides/proxy.md", "guides/kernel.md"):
        html = _page(site, md)
        assert 'class="language-python highlight"' in html or 'class="highlight"' in html, md
    assert "alter_client_quotas" in _text(_page(site, "index.md"))


_OUTSIDE = re.compile(r"shared/(?:spec|seeds|reviews|tools)|/work/")


def test_nothing_points_outside_the_repository():
    files = [ROOT / "README.md", *DOCS.rglob("*.md")]
    for folder in ("python", "benches", "tests", "examples", "scripts"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".pyi", ".md", ".sh")]
    files += list((ROOT / "tests" / "fixtures").rglob("*.json"))
    files += [p for p in (ROOT / "rust").rglob("*") if p.suffix in (".rs", ".md", ".toml") and "target" not in p.parts]
    this = pathlib.Path(__file__).resolve()
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files if p.resolve() != this
             for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if _OUTSIDE.search(line)]
    assert not found, f"paths outside the repository (move what they name into docs/): {found}"
