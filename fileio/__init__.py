"""The app's files (docs/security.md#files-from-outside), standard library only, below every
other package (docs/extending.md#the-codes-layout):

* `atomic`: every file the app writes is written all or nothing (a unique temporary file beside
  it, fsync, rename; never through a link);
* `in_place`: the few written as they go (logs, the run lock), never through a link;
* `folders`: the folders written into or trusted (out-dir, run folders, sweep cells, docs/):
  `trusted_folder`, the one rule: its own or refused (no link, this user's, not writable by
  every user; group-writable: a warning), nothing chowned or chmodded;
* `names`: `safe_name`, the one rule that makes a name from a config, set-up or sweep file one
  path component;
* `reading`: every file read back, bounded (regular files only, a size limit before reading, no
  link followed), and `yaml_file` for YAML without aliases (PyYAML imported when used);
* `errors`: `UnusableFile`, whose message names the file and the fix.
"""

import fedacg_gc  # noqa: F401  (first: a module that shadows one of ours is named)
