"""The wire codecs: what travels between aiosb's client transports and its servers, and
between both and a real Service Bus. They serve both sides, so they live in neither:

* :mod:`aiosb.wire.rest`: the documented Service Bus REST encoding of messages;
* :mod:`aiosb.wire.aiosb_json`: aiosb's exact, typed JSON encodings (the ``$aiosb``
  extensions of aiosb's own server);
* :mod:`aiosb.wire.json_values`: JSON values as those encodings write them, and their
  reader and writer;
* :mod:`aiosb.wire.atom`: the Atom entity descriptions of the management API;
* :mod:`aiosb.wire.status`: errors as HTTP statuses and back.

They import only the vocabulary (:mod:`aiosb.errors`, :mod:`aiosb.message`,
:mod:`aiosb.entities`), never a transport, a server or the emulator.
"""
