"""``python -m aiosb``: the same as the ``aiosb`` command."""

from .cli import main

raise SystemExit(main())
