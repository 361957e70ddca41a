"""``kquota configs --bootstrap-server HOST:PORT``: the configs command against a running cluster
(Apache Kafka's brokers, or a ``kquota proxy``) over DescribeClientQuotas / AlterClientQuotas
(KIP-546), as ``kafka-configs.sh --bootstrap-server`` does, instead of a kquota store.

The options, the checks of the command line and the output formats are the store mode's
(:mod:`kquota.configs_cli`), so ``--describe --json`` from a cluster feeds ``--quota-file`` of a
store or of another cluster. A describe sends Kafka's filter: ``--entity-name`` is an exact
match, ``--entity-default`` the default match, a bare ``--entity-type`` any name, strict (only
the named entity types), as kafka-configs sends it. An alter is one AlterClientQuotas request
(every ``--quota-file`` entry in it; ``--dry-run`` sets ``ValidateOnly``); each entity's result
is printed, errors in Kafka's terms on stderr, and the status is 1 if any entry failed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional

from kquota.configs_format import DEFAULT_MARK, print_altered, print_described
from kquota.entity import ClientQuotaEntity
from kquota.exceptions import QuotaConfigError
from kquota.kafka.admin_client import AdminConnection, error_name
from kquota.kafka.client_quotas import MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT, entity_of, filter_component, wire_entity, wire_ops
from kquota.kafka.client_security import ClientSecurity, client_security
from kquota.kafka.java_properties import load_properties


def filter_components(spec: list[tuple[str, Optional[str]]]) -> list[dict[str, Any]]:
    """The DescribeClientQuotas components of a parsed entity spec (see ``configs_cli``)."""
    return [filter_component(key, MATCH_ANY) if name is None
            else filter_component(key, MATCH_DEFAULT) if name == DEFAULT_MARK
            else filter_component(key, MATCH_EXACT, name) for key, name in spec]


def state_of(entries: list[dict[str, Any]], warnings: list[str]) -> dict[ClientQuotaEntity, dict[str, float]]:
    """A DescribeClientQuotas answer as ``{entity: {key: value}}`` (entities kquota cannot name,
    e.g. an entity type of a newer Kafka, are left out with a warning)."""
    state: dict[ClientQuotaEntity, dict[str, float]] = {}
    for entry in entries:
        try:
            entity = entity_of(entry["Entity"])
        except QuotaConfigError as e:
            names = {part["EntityType"]: part["EntityName"] for part in entry["Entity"] or []}
            warnings.append(f"skipped entity {names}: {e}")
            continue
        state[entity] = {v["Key"]: v["Value"] for v in entry["Values"] or []}
    return state


def _security(args: argparse.Namespace) -> ClientSecurity:
    if args.command_config is None:
        return ClientSecurity()
    security = client_security(load_properties(args.command_config, "--command-config"), args.command_config)
    for key in security.ignored:
        print(f"kquota configs: warning: {args.command_config}: {key} is not used", file=sys.stderr)
    return security


def run_bootstrap(args: argparse.Namespace, spec: list, entries: Optional[list]) -> int:
    """The configs command over the admin protocol; ``entries`` None for a describe."""
    security = _security(args)
    warnings: list[str] = []
    with AdminConnection(args.bootstrap_server, security) as admin:
        if entries is None:
            state = state_of(admin.describe_client_quotas(filter_components(spec), strict=bool(spec)), warnings)
            for m in warnings:
                print(f"kquota configs: warning: {m}", file=sys.stderr)
            print_described(state, spec, args.json, f"the cluster at {admin.where}")
            return 0
        results = admin.alter_client_quotas(
            [{"Entity": wire_entity(e), "Ops": wire_ops(ops)} for e, ops in entries], validate_only=args.dry_run)
        if len(results) != len(entries):
            raise QuotaConfigError(f"{admin.where} answered {len(results)} results for {len(entries)} entries: "
                                   "what was applied is unknown; run --describe")
        failed = {i: r for i, r in enumerate(results) if r["ErrorCode"]}
        done = [(e, ops) for i, (e, ops) in enumerate(entries) if i not in failed]
        after: dict[ClientQuotaEntity, dict[str, float]] = {}
        if args.json and done:
            after = state_of(admin.describe_client_quotas([], strict=False), warnings)
            if args.dry_run:  # what the alter would leave: the current values with the ops applied
                for e, ops in done:
                    config = dict(after.get(e, {}))
                    for k, v in ops.items():
                        if v is None:
                            config.pop(k, None)
                        else:
                            config[k] = float(v)
                    after[e] = config
    for m in warnings:
        print(f"kquota configs: warning: {m}", file=sys.stderr)
    for i, (entity, _) in enumerate(entries):
        if i in failed:
            r = failed[i]
            print(f"Error while updating config for {entity}: {error_name(r['ErrorCode'])}: "
                  f"{r.get('ErrorMessage') or 'no message'}", file=sys.stderr)
        elif not args.json:
            print(f"Validated config for {entity} (--dry-run: nothing changed)." if args.dry_run
                  else f"Completed updating config for {entity}.")
    if args.json:
        print_altered([(e, after.get(e, {})) for e, _ in done])
    if failed:
        print(f"kquota configs: {len(failed)} of {len(entries)} entries refused by {args.bootstrap_server}"
              + ("" if args.dry_run else f"; the other {len(entries) - len(failed)} applied"), file=sys.stderr)
        return 1
    return 0

