"""What compiling gives (:mod:`._compile`): a :class:`Filter` or an :class:`Action`, each
the closures of one expression with its text and parameters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._view import MessageView

__all__ = ["Action", "Filter", "Fn", "Statement"]

Fn = Callable[[MessageView], Any]
Statement = Callable[[MessageView], None]


class Filter:
    """A compiled SQL filter: :meth:`matches` tells whether a message is selected.

    Attributes:
        text: The expression as given.
        parameters: The parameters it was compiled with (a copy).
    """

    __slots__ = ("_test", "parameters", "text")

    def __init__(self, text: str, parameters: dict[str, Any], test: Fn) -> None:
        self.text = text
        self.parameters = parameters
        self._test = test

    def matches(self, view: MessageView) -> bool:
        """Whether the condition is TRUE for ``view`` (FALSE and unknown do not match).

        Raises:
            FilterEvaluationError: The condition cannot be evaluated on this message.
        """
        return self._test(view) is True

    def __repr__(self) -> str:
        return f"Filter({self.text!r})"


class Action:
    """A compiled SQL action: :meth:`apply` runs its statements on a message, in order.

    Attributes:
        text: The statements as given.
        parameters: The parameters they were compiled with (a copy).
    """

    __slots__ = ("_statements", "parameters", "text")

    def __init__(self, text: str, parameters: dict[str, Any], statements: list[Statement]):
        self.text = text
        self.parameters = parameters
        self._statements = tuple(statements)

    def apply(self, view: MessageView) -> None:
        """Run the statements: user properties change in ``view.properties``, system
        properties in ``view.system_changes``.

        Raises:
            FilterEvaluationError: A statement cannot be evaluated on this message; the
                statements before it have run (discard the view's copy).
        """
        for statement in self._statements:
            statement(view)

    def __repr__(self) -> str:
        return f"Action({self.text!r})"
