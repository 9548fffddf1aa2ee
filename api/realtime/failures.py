"""Saying that a loop's call keeps failing without a line every few seconds: the
first failure with its traceback, then the 2nd, 4th, 8th... in a row in one line
each, and once when it works again. A stream reader whose engine was down logged
a traceback at every retry (every 5 s: 465 of them while a stopped server
lingered); an hour down is now 11 lines."""

from __future__ import annotations

import logging


class RepeatedFailures:
    """The failures in a row of one loop (`what` says which, in its lines)."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._logger = logger
        self._what = what
        self.count = 0  # in a row

    def failed(self, exc: Exception, then: str = "") -> None:
        """Called in an `except` block: `exc` is the failure being handled."""
        self.count += 1
        if self.count == 1:
            self._logger.exception("%s failed%s", self._what, then)
        elif self.count & (self.count - 1) == 0:
            self._logger.error(
                "%s still fails (%d times in a row): %s: %s",
                self._what,
                self.count,
                type(exc).__name__,
                exc,
            )

    def worked(self) -> None:
        if self.count:
            self._logger.info("%s works again after %d failures", self._what, self.count)
            self.count = 0
