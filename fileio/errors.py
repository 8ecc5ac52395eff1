"""The one error of the `fileio` package (docs/security.md#files-from-outside)."""


class UnusableFile(OSError):
    """A file or folder the app cannot use as it is: a link where none is followed, not a regular
    file (a named pipe, a device), larger than such a file may be, not what it should hold, or
    not writable. The message names the file and the fix."""
