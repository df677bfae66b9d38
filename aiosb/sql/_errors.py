"""The one error of evaluating a rule (compile errors are :class:`aiosb.errors.InvalidArgument`)."""

from __future__ import annotations

from ..errors import MessagingError

__all__ = ["FilterEvaluationError"]


class FilterEvaluationError(MessagingError):
    """A rule's filter or action could not be evaluated on this message.

    Service Bus raises a FilterException here (a type mismatch such as a string compared
    with a number, an integer divided by zero, an integer out of the Int64 range, a LIKE
    on a non-string, a system property set to a value of the wrong type). The broker
    dead-letters the message when the subscription has
    ``dead_lettering_on_filter_evaluation_exceptions``. Not retryable: the same message
    fails the same way.
    """
