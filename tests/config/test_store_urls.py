"""Every store URL form means one file in every command (docs/store-urls.md, kquota.stores.url):
``kquota configs --alter`` and ``--describe`` as real CLI processes, the Python API and the
``QuotaConfigWatcher`` in-process, and ``kquota proxy --store`` as a process answering a
DescribeClientQuotas from the store; ZooKeeper URLs through the same commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse

import pytest
from kquota import ClientQuotaEntity, QuotaManager
from kquota.stores import ConfigStoreError, open_store
from kquota.stores.url import parse_store_url, sqlite_url
from kquota.watcher import QuotaConfigWatcher
from store_helpers import fresh_zk_url
from waiting import wait_call

pytestmark = pytest.mark.process

ODD = "odd #?%&+;'=.db"  # every character a URL or a shell treats specially, except / and NUL


def forms(root) -> list[tuple[str, str]]:
    """(the --store text, the file it must mean) with the working directory root/"cwd" and the
    home directory root/"home"."""
    cwd, home, abs_dir = str(root / "cwd"), str(root / "home"), str(root / "abs dir")
    quoted = urllib.parse.quote(ODD)
    return [
        ("sqlite:///rel.db", f"{cwd}/rel.db"),                          # SQLAlchemy: relative
        ("sqlite:///sub dir/rel.db", f"{cwd}/sub dir/rel.db"),          # a literal space
        (f"sqlite:///sub%20dir/{quoted}", f"{cwd}/sub dir/{ODD}"),      # percent-decoded
        (f"sqlite:///{abs_dir}/abs.db", f"{abs_dir}/abs.db"),            # sqlite://// + /path: absolute
        (f"sqlite:////{abs_dir}/double.db", f"{abs_dir}/double.db"),     # "//path" is "/path"
        ("sqlite:///~/home.db", f"{home}/home.db"),                     # ~ is the home directory
        (f"{abs_dir}/{ODD}", f"{abs_dir}/{ODD}"),                       # plain paths: literal
        (f"sub dir/plain {ODD}", f"{cwd}/sub dir/plain {ODD}"),
        ("~/plain.db", f"{home}/plain.db"),
        (sqlite_url(f"{abs_dir}/canonical {ODD}"), f"{abs_dir}/canonical {ODD}"),  # what store.url says
    ]


@pytest.fixture
def place(tmp_path, monkeypatch):
    for d in ("cwd/sub dir", "home", "abs dir"):
        (tmp_path / d).mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KQUOTA_STORE", raising=False)
    return tmp_path


def files(root) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if not f.endswith(("-wal", "-shm"))}


def kq(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kquota", "configs", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ), timeout=60, check=False)


def test_every_form_means_one_file_in_the_cli_the_api_and_the_watcher(place):
    for i, (url, path) in enumerate(forms(place)):
        assert parse_store_url(url).path == path, url
        # --describe first: refuses to create the store and names the file it means.
        p = kq("--store", url, "--describe", cwd=place / "cwd")
        assert p.returncode == 1 and f"no store at {path} ({url})" in p.stderr, (url, p.stderr)
        assert not os.path.exists(path)
        before = files(place)
        p = kq("--store", url, "--alter", "--add-config", f"producer_byte_rate={1000 + i}", "--user", "u",
               cwd=place / "cwd")
        assert p.returncode == 0 and f"created a new store at {path}" in p.stderr, (url, p.stderr)
        assert files(place) - before == {path}, url  # that file and nothing else
        p = kq("--store", url, "--describe", "--json", cwd=place / "cwd")  # the read-only open
        assert p.returncode == 0, (url, p.stderr)
        assert json.loads(p.stdout)["quotas"] == [{"entity": {"user": "u"}, "config": {"producer_byte_rate": 1000 + i}}]
        # The Python API and its canonical URL.
        store = open_store(url, poll_interval=0.01)
        try:
            assert os.path.samefile(store.path, path)
            assert parse_store_url(store.url).path == path
            assert store.describe() == {ClientQuotaEntity({"user": "u"}): {"producer_byte_rate": 1000.0 + i}}
            # The watcher follows the file a CLI alter on the same URL writes.
            qm = QuotaManager()
            with QuotaConfigWatcher(store, qm) as w:
                n = w.applied_count
                assert qm.describe_client_quotas() == store.describe()
                p = kq("--store", url, "--alter", "--add-config", "consumer_byte_rate=7", "--user", "u",
                       cwd=place / "cwd")
                assert p.returncode == 0, p.stderr
                assert w.wait_applied(n + 1, 10)
                assert qm.describe_client_quotas()[ClientQuotaEntity({"user": "u"})]["consumer_byte_rate"] == 7
            qm.close()
        finally:
            store.close()
        with open_store(url, read_only=True) as ro:
            assert ro.describe()[ClientQuotaEntity({"user": "u"})]["consumer_byte_rate"] == 7


def test_a_url_in_the_earlier_absolute_convention_is_refused_not_made_relative(place):
    absolute = place / "abs dir" / "old.db"
    with open_store(str(absolute)) as s:
        s.alter([({"user": "a"}, {"producer_byte_rate": 1})])
    old = "sqlite://" + str(absolute).replace(" ", "%20")  # sqlite:///tmp/.../old.db: now relative
    for args in (["--describe"], ["--alter", "--add-config", "producer_byte_rate=2", "--user", "a"]):
        p = kq("--store", old, *args, cwd=place / "cwd")
        assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, p.stderr
        assert "relative to the working directory" in p.stderr and sqlite_url(str(absolute)) in p.stderr
    assert files(place / "cwd") == set()
    with pytest.raises(ConfigStoreError, match="relative to the working directory"):
        open_store(old)
    # "./" says: relative, knowingly.
    here = place / "cwd" / str(absolute).lstrip("/")
    here.parent.mkdir(parents=True)
    with open_store("sqlite:///./" + str(absolute).lstrip("/").replace(" ", "%20")) as s:
        assert os.path.samefile(s.path, here) and s.describe() == {}


def test_zookeeper_urls_in_the_cli_the_api_and_the_watcher(tmp_path):
    url = fresh_zk_url()
    for form in (url, url.replace("zookeeper://", "zk://", 1)):
        p = kq("--store", form, "--alter", "--add-config", "producer_byte_rate=5", "--user", "z", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        p = kq("--store", form, "--describe", "--json", cwd=tmp_path)
        assert p.returncode == 0 and json.loads(p.stdout)["quotas"][0]["entity"] == {"user": "z"}, p.stderr
    store = open_store(url.replace("zookeeper://", "zk://", 1))
    try:
        assert store.url == url
        qm = QuotaManager()
        with QuotaConfigWatcher(store, qm) as w:
            n = w.applied_count
            assert kq("--store", url, "--alter", "--add-config", "consumer_byte_rate=9", "--user", "z",
                      cwd=tmp_path).returncode == 0
            assert w.wait_applied(n + 1, 10)
            assert qm.describe_client_quotas()[ClientQuotaEntity({"user": "z"})]["consumer_byte_rate"] == 9
        qm.close()
    finally:
        store.close()


# ---------------------------------------------------------------------------- kquota proxy --store


def _describe_over_kafka(port: int, proc: subprocess.Popen) -> dict:
    from kquota.kafka.protocol import apis
    from proxy_wire import Wire

    w = wait_call(lambda: Wire(("127.0.0.1", port)), 20, alive=lambda: proc.poll() is None)
    try:
        resp = w.call(apis.DESCRIBE_CLIENT_QUOTAS, 1, "DescribeClientQuotas", {"Components": [], "Strict": False})
    finally:
        w.close()
    assert resp["ErrorCode"] == 0, resp
    return {tuple((e["EntityType"], e["EntityName"]) for e in x["Entity"]): {v["Key"]: v["Value"] for v in x["Values"]}
            for x in resp["Entries"]}


def test_every_form_means_the_same_file_to_kquota_proxy(place, broker):
    from waiting import free_port

    for i, (url, path) in enumerate(forms(place)):
        with open_store(path) as s:
            s.alter([({"user": "p"}, {"producer_byte_rate": 2000 + i})])
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", broker.address,
                                 "--listen", f"127.0.0.1:{port}", "--store", url, "--describe-principals",
                                 "ANONYMOUS"], cwd=place / "cwd",
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
        try:
            described = _describe_over_kafka(port, proc)
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        assert described == {(("user", "p"),): {"producer_byte_rate": 2000.0 + i}}, (url, err.decode())
        assert proc.returncode == 0, err.decode()


def test_a_missing_folder_is_named_and_a_relative_url_says_so(tmp_path, monkeypatch):
    """``sqlite:///data/x.db`` is relative to the working directory (as in SQLAlchemy): where
    ``data`` is missing the error says so and gives the absolute form, instead of SQLite's bare
    "unable to open database file"; nothing is created."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with pytest.raises(ConfigStoreError) as e:
        open_store("sqlite:///data/x.db")
    assert str(e.value) == (f"store sqlite:///data/x.db: cannot create {cwd}/data/x.db: no folder {cwd}/data "
                            f"(sqlite:///data/x.db is relative to the working directory {cwd}; an absolute path "
                            "takes four slashes: sqlite:////data/x.db)")
    # An absolute URL or a plain path: the folder is named, no relative hint.
    with pytest.raises(ConfigStoreError, match=rf"^store sqlite:///{tmp_path}/nope/x.db: cannot create "
                                               rf"{tmp_path}/nope/x.db: no folder {tmp_path}/nope$"):
        open_store(f"sqlite:///{tmp_path}/nope/x.db")
    with pytest.raises(ConfigStoreError, match=r"no folder .*/cwd/nope$"):
        open_store("nope/x.db")
    assert list(cwd.iterdir()) == []
    (cwd / "data").mkdir()
    open_store("sqlite:///data/x.db").close()
    assert (cwd / "data" / "x.db").exists()
