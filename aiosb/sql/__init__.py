"""The Service Bus SQL filter and action language, compiled to Python closures (#14).

A topic subscription's rules select messages with a SQL filter (a subset of SQL-92) and
may annotate them with a SQL action. This package compiles both, once, and evaluates
them per message; the broker calls it::

    f = compile_filter("sys.Label = 'order' AND region IN ('eu', @r)", {"r": "us"})
    f.matches(MessageView(message, properties))       # True only when the filter is TRUE
    a = compile_action("SET region = 'x'; REMOVE tmp")
    a.apply(view)                                     # changes view.properties in place

It imports nothing of the emulator, transports or client: only :mod:`aiosb.errors`,
:mod:`aiosb.message`, the standard library and lark. The grammar is ``grammar.lark``
beside this file, loaded once (LALR).

Filters
    Conditions: ``= <> != > >= < <=``; ``AND``, ``OR``, ``NOT`` (precedence: NOT, then
    AND, then OR; comparisons bind tighter than all three); ``x [NOT] IN (a, b, ...)``;
    ``x [NOT] LIKE 'pattern' [ESCAPE 'c']`` (``%`` any run of characters, ``_`` any one
    character); ``x IS [NOT] NULL``; ``EXISTS(property)``; parentheses. ``TRUE`` and
    ``FALSE`` are conditions too (``1=1`` is the true filter). Values: string constants
    (``'it''s'``), integers (Int64: ``1894``), decimals and approximate numbers (Double:
    ``1894.1204``, ``2.0``, ``101.5E5``, ``0.5E-2``), ``TRUE``/``FALSE``, ``NULL``,
    parameters ``@name``, properties, ``+ - * / %`` and unary ``+ -`` (``* / %`` bind
    tighter than ``+ -``), and the functions ``newid()`` (a new GUID), ``property(name)``
    and ``p(name)`` (the property a string names, e.g. ``p('sys.To')``).

Actions
    ``SET <property> = <value>`` and ``REMOVE <property>``, any number, each optionally
    ended by ``;`` (``SET a = 1; REMOVE b;SET sys.CorrelationId = 'low';`` or
    ``SET a = 1 SET b = 2``). The value may use everything a filter's values may
    (properties, parameters, arithmetic). A SET of a user property that exists under
    another case changes that property.

Properties
    ``sys.<Name>`` is a system property; ``user.<name>`` or a bare ``<name>`` is a user
    (application) property. A name is a regular identifier (a letter, then letters,
    digits, ``_``), a ``[delimited name]`` (``]]`` for ``]``: ``[HR-EmployeeID]``,
    ``[Property With Space]``) or a ``"quoted name"`` (``""`` for ``"``).

    System properties (Service Bus's names; aiosb's fields): MessageId (message_id),
    CorrelationId, To, ReplyTo, Label and its newer name Subject (subject), SessionId,
    ReplyToSessionId, ContentType, PartitionKey, TimeToLive (a timedelta),
    ScheduledEnqueueTimeUtc (also ScheduledEnqueueTime), EnqueuedTimeUtc (also
    EnqueuedTime), SequenceNumber, DeliveryCount, ExpiresAtUtc (also ExpiresAt:
    EnqueuedTimeUtc + TimeToLive, NULL without either) and Size. Actions may SET the
    first eleven (those a sender sets); the rest are read-only. Also documented but not
    carried by aiosb, so NULL and read-only: DeadLetterSource, EnqueuedSequenceNumber,
    ForcePersistence, LockToken, LockedUntilUtc, State, ViaPartitionKey. Any other
    ``sys.`` name is refused at compile time (Microsoft: "an attempt to access a
    nonexistent system property is an error"). ``EXISTS(sys.X)`` is TRUE when the field
    has a value.

Case
    Keywords and function names are case-insensitive (``and``, ``Like``, ``NULL``).
    Property names are case-insensitive, as Microsoft documents ("Property names are
    case-insensitive"; its examples write ``sys.label``, ``sys.messageid``): for system
    properties always; for user properties a name is looked up exactly first and, if no
    property has that exact name, ignoring case (so with both ``Color`` and ``color``
    set, ``color`` reads ``color``). Parameter names match exactly, with or without the
    ``@``, then ignoring case. String *values* compare case-sensitively (ordinal), in
    ``=``, ``<``, ``IN`` and ``LIKE`` alike, as Microsoft documents for correlation
    filters ("for string expressions, the comparison is case-sensitive").

Unknown values (three-valued logic)
    A missing user property, and a property or parameter whose value is None, is NULL:
    unknown. Arithmetic and comparisons with an unknown operand are unknown, as are
    ``NOT unknown``, LIKE with any unknown operand, and IN with an unknown left operand;
    AND and OR follow Microsoft's tables (FALSE AND unknown is FALSE, TRUE OR unknown is
    TRUE). ``IS NULL`` is TRUE for a missing property or a None value. NULL items of an
    IN list match nothing. A filter matches only when it is TRUE.

Types ("operators follow C# implicit conversion semantics")
    Numbers compare and compute across int and float (an int with a float gives a
    float); integer ``/`` truncates toward zero and ``%`` keeps the dividend's sign, as
    in C#; an integer result beyond Int64, or an integer divided by zero, is an
    evaluation error; a float divided by zero is an infinity (or NaN). Strings compare
    with strings; ``+`` with a string concatenates (a number or boolean is written as
    C# writes it). Date-times compare with date-times (naive ones are UTC) and subtract
    to a timedelta; timedeltas compare, add and subtract, and shift date-times.
    Booleans, GUIDs (``uuid.UUID``) and bytes support ``=`` and ``<>`` only. Any other
    mix (a string compared with a number, a boolean with a number, ``'a' * 2``, LIKE on a
    number, a GUID compared with a string) raises :class:`FilterEvaluationError` when it
    is evaluated, as Service Bus raises a FilterException; evaluation stops early where
    the answer is known (``FALSE AND <error>`` is FALSE).

Errors
    Compile errors are :class:`aiosb.errors.InvalidArgument` (also a ValueError) whose
    sentence names the line and column, e.g. "the SQL filter has a problem at line 1,
    column 8: expected a value after '=', but found the end of the text." Besides
    syntax: a missing parameter, an unknown ``sys.`` property, an unknown function, an
    integer literal outside Int64, a constant LIKE pattern or escape that is not a
    string, a value where a condition belongs (``color`` alone) or the reverse, and in
    actions a read-only system property, REMOVE of a system property, or a user property
    name aiosb cannot carry. Keywords (AND OR NOT IS NULL IN LIKE ESCAPE EXISTS TRUE
    FALSE SET REMOVE) are reserved: a property of that name is written ``[set]``.

    Evaluation errors are :class:`FilterEvaluationError`, a
    :class:`aiosb.errors.MessagingError` (not an InvalidOperation: nothing was called
    wrongly; the message's data does not fit the rule), raised by
    :meth:`Filter.matches` and :meth:`Action.apply`; the broker
    dead-letters the message when the subscription asks for it
    (``dead_lettering_on_filter_evaluation_exceptions``).
"""

from __future__ import annotations

from ._compile import Action, Filter, compile_action, compile_filter
from ._errors import FilterEvaluationError
from ._view import MessageView

__all__ = [
    "Action",
    "Filter",
    "FilterEvaluationError",
    "MessageView",
    "compile_action",
    "compile_filter",
]
