"""The app's files: every file the app writes is written all or nothing (`atomic`: a unique
temporary file beside it, fsync, rename; never through a link). Standard library only, below
every other package (docs/extending.md#the-codes-layout)."""

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
