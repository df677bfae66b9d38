"""The trust of the machine the SDK samples run on (tests/realclock/samples.py): certifi's
bundle, which the official SDK reads for AMQP over TLS and no environment variable
changes, is the bundle ``AIOSB_TRUSTED_BUNDLE`` names (certifi's own certificates and
``aiosb serve``'s). Python imports this module at start-up, before the sample runs; the
sample itself is unmodified."""

import os

_bundle = os.environ.get("AIOSB_TRUSTED_BUNDLE")
if _bundle:
    try:
        import certifi
    except ImportError:
        pass
    else:
        certifi.where = lambda: _bundle
