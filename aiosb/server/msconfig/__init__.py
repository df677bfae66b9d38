"""Microsoft's Service Bus emulator's ``Config.json``, read and applied: what ``aiosb
serve --config Config.json`` does (#35).

The file is the one Microsoft's emulator mounts (its schema:
``ServiceBus-Emulator/Schema/Config-schema.json`` of the public
``Azure/azure-service-bus-emulator-installer`` repository): ``UserConfig.Namespaces``
with their ``Queues`` and ``Topics``, a topic's ``Subscriptions`` and a subscription's
``Rules`` (``Correlation`` or ``Sql`` filters, an ``Action``), each with its
``Properties``. Files shaped like that repository's examples load unchanged (``//``
comments too, as its documentation writes them).

- **Its defaults, not its limits.** A property left out takes the value Microsoft's
  emulator gives it (a one-hour time to live, a one-minute lock, three deliveries, a
  20-second duplicate detection window); its limits (50 entities, one hour at most, one
  namespace named ``sbemulatorns``) are not applied.
- **One sentence for a bad file**, naming the JSON path and what is wrong
  (``UserConfig.Namespaces[0].Queues[3].Properties.LockDuration: "PT1X" is not an ISO
  8601 duration``), before the server listens; never another exception, whatever the
  file holds (:mod:`._reader`: its size, nesting, numbers and durations are bounded). A
  key the schema does not know is reported (a warning), or refused when it is a
  misspelling of one it knows.
- **Names as Service Bus compares them**: without case (subscriptions ``s`` and ``S``
  of one topic, queues ``Q`` and ``q``, a queue and a topic, two rules of a
  subscription: given twice, refused), and checked by the emulator's own rules.
- **Whole or not at all.** The file is read and checked whole (:func:`load`), then
  checked against the namespace (:func:`plan`: a name held by another kind of entity,
  what Service Bus fixes at creation, forwarding to an entity that will not exist, the
  quotas), and only then applied (:mod:`._apply`): a file that fails creates nothing,
  and with ``--data-dir`` commits nothing.
- **Idempotent.** Applied at every start (with ``--data-dir`` the entities are kept):
  what is missing is created, what the file changed is updated and said, what is as the
  file says is left alone. A subscription that lists ``Rules`` has those rules and no
  other (its ``$Default`` rule, which takes every message, goes unless listed). What
  Service Bus fixes at creation (``RequiresSession``, ``RequiresDuplicateDetection``)
  cannot change on an existing entity: that is a sentence too.
"""

from ._apply import Plan, apply, carry_out, plan
from ._reader import MAX_BYTES, MAX_DEPTH, duration, load, parse
from ._spec import ConfigError, EmulatorConfig, EntitySpec, RuleSpec

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "ConfigError",
    "EmulatorConfig",
    "EntitySpec",
    "Plan",
    "RuleSpec",
    "apply",
    "carry_out",
    "duration",
    "load",
    "parse",
    "plan",
]
