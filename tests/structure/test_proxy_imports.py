"""``kquota.proxy`` is the proxy's: imported by the proxy and the ``kquota`` command line only.

What the proxy shares with the configs command and the stores (the wire protocol, Java
properties, client security, the client-quota wire form) is ``kquota.kafka``'s, so neither
``kquota configs --bootstrap-server`` nor a ``kafka://`` store loads the proxy. The command line
builds its ``proxy`` subcommand from ``kquota.proxy.cli``, which imports nothing of the proxy at
module level, and ``kquota/proxy/__init__`` imports its names on first use.
"""

from __future__ import annotations

import pytest
import ast
import json
import os
import socket
import subprocess
import sys

from test_structure import PYTHON, _python_modules, python_import_graph

#: The modules outside the proxy package that may import it: the command line's parser.
PROXY_IMPORTERS = frozenset({"kquota.cli"})
#: What building the ``kquota`` parser loads of the proxy: the package (nothing at module level)
#: and its parser.
PARSER_MODULES = frozenset({"kquota.proxy", "kquota.proxy.cli"})


def _is_proxy(name: str) -> bool:
    return name == "kquota.proxy" or name.startswith("kquota.proxy.")


def test_only_the_proxy_and_the_cli_import_the_proxy():
    """An AST scan: every import statement (module level, lazy, ``TYPE_CHECKING``) of every
    module outside ``kquota/proxy/``."""
    offenders = {name: sorted(t for t in targets if _is_proxy(t))
                 for name, targets in python_import_graph().items()
                 if not _is_proxy(name) and name not in PROXY_IMPORTERS}
    offenders = {name: found for name, found in offenders.items() if found}
    assert offenders == {}, f"modules outside kquota.proxy importing it: {offenders}"


def test_the_scan_sees_a_lazy_proxy_import():
    # The checker itself: kquota.cli's lazy import of the proxy's parser is an edge it finds.
    assert any(_is_proxy(t) for t in python_import_graph()["kquota.cli"])


def test_proxy_package_and_parser_import_nothing_of_the_proxy_at_module_level():
    """``kquota/proxy/__init__.py`` and ``kquota/proxy/cli.py`` import no proxy module when
    imported (only inside functions or under ``TYPE_CHECKING``)."""
    for name in sorted(PARSER_MODULES):
        path, _ = _python_modules()[name]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        eager = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
                 and any(_is_proxy(m) for m in _import_targets(node))]
        assert eager == [], f"{name} imports the proxy at module level: {eager}"


def _import_targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    return [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]


def _proxy_modules_loaded(argv: list[str], tmp_path) -> tuple[int, list[str]]:
    """Runs ``kquota <argv>`` in a fresh interpreter: its exit status and the ``kquota.proxy``
    modules loaded by then."""
    code = (
        "import json, sys\n"
        "from kquota import cli\n"
        "try:\n"
        f"    rc = cli.main({argv!r})\n"
        "except SystemExit as e:\n"
        "    rc = e.code\n"
        "print(json.dumps([rc, sorted(m for m in sys.modules if m == 'kquota.proxy' "
        "or m.startswith('kquota.proxy.'))]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PYTHON), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                         cwd=tmp_path)
    rc, modules = json.loads(out.stdout.strip().splitlines()[-1])
    return rc, modules


@pytest.mark.process
def test_configs_help_loads_no_proxy_module(tmp_path):
    rc, modules = _proxy_modules_loaded(["configs", "--help"], tmp_path)
    assert rc == 0
    assert set(modules) <= PARSER_MODULES, modules


@pytest.mark.process
def test_configs_bootstrap_path_loads_no_proxy_module(tmp_path, pki):
    """``kquota configs --bootstrap-server`` with TLS client properties: the properties read, the
    TLS context built, the admin connection tried (to a closed port) without the proxy."""
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SSL\nssl.truststore.location={pki.ca.pem}\n", encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: the connection is refused
        rc, modules = _proxy_modules_loaded(["configs", "--bootstrap-server", f"127.0.0.1:{port}",
                                             "--command-config", str(config), "--describe",
                                             "--entity-type", "users"], tmp_path)
    assert rc == 1
    assert set(modules) <= PARSER_MODULES, modules
