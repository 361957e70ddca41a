"""A watcher process for the convergence tests: follows a store, prints the manager's state.

    python watcher_proc.py URL
Prints "ready" once the initial load is applied, then, after every applied change, one JSON line
in the quota configuration file format (sorted), so a test can wait for a state.
"""

import json
import sys

import kquota
from kquota.config_file import quota_config_document
from kquota.stores import open_store
from kquota.watcher import QuotaConfigWatcher


def dump(qm):
    entries = sorted(qm.describe_client_quotas().items(), key=lambda kv: json.dumps(kv[0].entries, sort_keys=True))
    return json.dumps(quota_config_document(entries), sort_keys=True)


def main():
    qm = kquota.QuotaManager()
    store = open_store(sys.argv[1])
    watcher = QuotaConfigWatcher(store, qm, on_applied=lambda _e: print(dump(qm), flush=True),
                                 on_error=lambda m: print("error " + m, flush=True))
    watcher.start()
    print("ready", flush=True)
    sys.stdin.readline()  # runs until the test closes stdin
    watcher.stop()
    store.close()


if __name__ == "__main__":
    main()
