"""A progress bar for long reads: the ``on_progress(nbytes)`` callback that the readers, the
report and the CLI's long commands take, drawn with tqdm on a terminal."""

import sys

try:
    from tqdm import tqdm as _tqdm
except ImportError:  # Optional: without it, long commands draw no progress bar.
    _tqdm = None

__all__ = ["Progress"]


class Progress:
    """A tqdm progress bar on stderr, drawn only when stderr is a terminal and tqdm is
    installed (Debian: python3-tqdm); otherwise it draws nothing. Called with byte counts."""

    def __init__(self, total, label, stream=None, force=None):
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.total = max(int(total), 1)
        self.label = label
        self.done = 0
        self._bar = None
        if (isatty if force is None else force) and _tqdm is not None:
            self._bar = _tqdm(
                total=self.total,
                desc=label,
                file=self.stream,
                unit="B",
                unit_scale=True,
                mininterval=0.1,
                bar_format="{desc} [{bar:30}] {percentage:5.1f}% {rate_fmt}",
            )

    @property
    def enabled(self):
        return self._bar is not None

    def __call__(self, n):
        self.update(n)

    def update(self, n):
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
