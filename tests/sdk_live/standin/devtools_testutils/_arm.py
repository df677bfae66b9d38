"""What stands for Azure Resource Manager (the ``azure-mgmt-servicebus`` and
``azure-mgmt-resource`` clients the preparers call): one namespace, ``aiosb serve``'s,
whose entities are made and removed with the SDK's own administration client.

The harness (``tests/sdk_live/run.py``) tells it, in the environment:

- ``AIOSB_SDK_TESTS_HOST``: the namespace's host name (``localhost``: the port map in
  ``sitecustomize.py`` sends 5671 and 443 there to the server's ports);
- ``SERVICEBUS_SAS_POLICY`` / ``SERVICEBUS_SAS_KEY``: the root key (Manage, Send, Listen);
- ``AIOSB_SDK_TESTS_KEYS``: ``Right=name:key`` pairs, comma-separated, of keys the server
  was started with that carry one right only (``Send``, ``Listen``): a namespace
  authorization rule with those rights is given that key, as Azure would mint one.
"""

from __future__ import annotations

import base64
import os
import secrets
from types import SimpleNamespace
from typing import ClassVar

_admin = None


def admin():
    """The SDK's administration client, on the root key (made once)."""
    global _admin
    if _admin is None:
        from azure.servicebus.management import ServiceBusAdministrationClient

        _admin = ServiceBusAdministrationClient.from_connection_string(connection_string())
    return _admin


def connection_string(name=None, key=None, entity=None):
    host = os.environ["AIOSB_SDK_TESTS_HOST"]
    name = name or os.environ["SERVICEBUS_SAS_POLICY"]
    text = (f"Endpoint=sb://{host}/;SharedAccessKeyName={name}"
            f";SharedAccessKey={key or os.environ['SERVICEBUS_SAS_KEY']}")
    return text + (f";EntityPath={entity}" if entity else "")


def _keys(name, key, entity=None):
    return SimpleNamespace(primary_connection_string=connection_string(name, key, entity),
                           key_name=name, primary_key=key)


def _rights(parameters):
    return sorted(str(getattr(right, "value", right)) for right in parameters.rights)


class _Poller:
    def __init__(self, result):
        self._result = result

    def result(self, timeout=None):
        return self._result

    def wait(self, timeout=None):
        return None

    def done(self):
        return True


def _resource(name, kind):
    return SimpleNamespace(name=name, id=f"/aiosb/{kind}/{name}")


class _ResourceGroups:
    def create_or_update(self, name, parameters):
        return _resource(name, "resourceGroups")

    def begin_delete(self, name, polling=True):
        return _Poller(None)


class _Namespaces:
    #: rule name -> its rights, as the preparer asked for them
    rules: ClassVar[dict] = {}

    def begin_create_or_update(self, group, name, parameters):
        return _Poller(_resource(os.environ["AIOSB_SDK_TESTS_HOST"], "namespaces"))

    def list_keys(self, group, namespace, rule):
        rights = self.rules.get(rule)
        if rights is None or "Manage" in rights:
            return _keys(os.environ["SERVICEBUS_SAS_POLICY"], os.environ["SERVICEBUS_SAS_KEY"])
        limited = dict(pair.split("=", 1)
                       for pair in os.environ["AIOSB_SDK_TESTS_KEYS"].split(",") if pair)
        if len(rights) != 1 or rights[0] not in limited:
            raise NotImplementedError(f"no key of the server has exactly the rights {rights}")
        name, key = limited[rights[0]].split(":", 1)
        return _keys(name, key)

    def create_or_update_authorization_rule(self, group, namespace, name, parameters):
        self.rules[name] = _rights(parameters)
        return _resource(name, "authorizationRules")

    def delete_authorization_rule(self, group, namespace, name):
        self.rules.pop(name, None)

    def delete(self, group, name):
        return None


class _Queues:
    def create_or_update(self, group, namespace, name, queue):
        admin().create_queue(
            name, lock_duration=queue.lock_duration,
            requires_duplicate_detection=queue.requires_duplicate_detection,
            dead_lettering_on_message_expiration=queue.dead_lettering_on_message_expiration,
            requires_session=queue.requires_session,
            enable_partitioning=queue.enable_partitioning)
        return _resource(name, "queues")

    def delete(self, group, namespace, name):
        admin().delete_queue(name)

    def create_or_update_authorization_rule(self, group, namespace, queue, name, parameters):
        """An entity-level rule, through the administration client (the queue's
        ``AuthorizationRules`` in Atom), with a key made here, as Azure makes one."""
        from azure.servicebus.management import AuthorizationRule

        key = base64.b64encode(secrets.token_bytes(32)).decode()
        properties = admin().get_queue(queue)
        properties.authorization_rules = [*(properties.authorization_rules or []),
                                          AuthorizationRule(key_name=name, primary_key=key,
                                                            secondary_key=key,
                                                            rights=_rights(parameters))]
        admin().update_queue(properties)
        return _resource(name, "authorizationRules")

    def list_keys(self, group, namespace, queue, name):
        for rule in admin().get_queue(queue).authorization_rules or []:
            if rule.key_name == name:
                return _keys(name, rule.primary_key, entity=queue)
        raise LookupError(f"queue {queue} has no authorization rule {name} (the server "
                          "did not keep the one the preparer made)")

    def delete_authorization_rule(self, group, namespace, queue, name):
        return None


class _Topics:
    def create_or_update(self, group, namespace, name, parameters):
        admin().create_topic(name)
        return _resource(name, "topics")

    def delete(self, group, namespace, name):
        admin().delete_topic(name)


class _Subscriptions:
    def create_or_update(self, group, namespace, topic, name, subscription):
        admin().create_subscription(
            topic, name, lock_duration=subscription.lock_duration,
            requires_session=subscription.requires_session,
            dead_lettering_on_message_expiration=subscription.dead_lettering_on_message_expiration)
        return _resource(name, "subscriptions")

    def delete(self, group, namespace, topic, name):
        admin().delete_subscription(topic, name)


class FakeArmClient:
    """``ResourceManagementClient`` and ``ServiceBusManagementClient`` in one."""

    def __init__(self):
        self.resource_groups = _ResourceGroups()
        self.namespaces = _Namespaces()
        self.queues = _Queues()
        self.topics = _Topics()
        self.subscriptions = _Subscriptions()
