"""Start failures: why a server that did not come up did not, and whose problem it is.

A server that exits before it is ready ends its attempt one of two ways: *blocked*, when
the cause is outside the measurement (a missing file or component, hardware it cannot
use), which a person fixes before `campaign resume`; or *failed*, when the arm itself is
broken. The difference is read from the log's last words, and each runtime words them
its own way, so the rules are a value each adapter sets (`RuntimeAdapter.start_failures`)
and nothing else in the adapter needs to know them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Error-level lines in logs without a format of their own: `ERROR ...` / `FATAL` / `CRITICAL`
# level words, `error: ...`, and Python's final `SomeError: ...` line of a traceback.
ERROR_LINE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b|^(?i:error|fatal)\b|^[\w.]*(?:Error|Exception):")
CAUSE_GAP = 2  # other lines allowed between two error lines of one cascade
CAUSE_WINDOW = 10  # the cause of exit ends within this many final lines
FINAL_LINES = 3  # the cause when no error-level line is near the end

# start-failure text that means an external blocker on any runtime
BLOCKED_ANYWHERE = (
    r"No such file or directory",
    r"failed to (?:open|load) model",
    r"is unavailable",
    r"not supported on this (?:hardware|device|platform)",
)


@dataclass(frozen=True)
class StartClassification:
    """`blocked` is an external reason (missing component, file, hardware), kept word for word."""

    blocked: bool
    message: str


@dataclass(frozen=True)
class StartFailures:
    """One runtime's rules: `blocked_patterns` (text of an external cause), exit codes that
    mean blocked whatever the log says, and `error_lines` (what an error-level line looks
    like in its log)."""

    blocked_patterns: tuple[str, ...] = BLOCKED_ANYWHERE
    blocked_exit_codes: frozenset[int] = frozenset()
    error_lines: tuple[re.Pattern[str], ...] = (ERROR_LINE,)

    def classify(self, exit_code: int | None, log_tail: str) -> StartClassification:
        """Blocked only when the cause of exit (`exit_cause`) is an external one, quoted word
        for word (with the cascade's first error when that is another line: "failed to load
        model X" says which file, "failed to read key-value pairs" what is wrong with it); a
        blocked-looking warning earlier in the log (a missing optional file) says nothing
        about why the server stopped. Otherwise failed, quoting the first line of the cause
        (the root of the cascade, not its "exiting" epilogue)."""
        lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
        cause = self.exit_cause(lines)
        root = cause[0] if cause and self.is_error_line(cause[0]) else None
        for pattern in self.blocked_patterns:
            for line in cause:
                if re.search(pattern, line, re.IGNORECASE):
                    return StartClassification(True, line if root in (None, line) else f"{line} (first error: {root})")
        quoted = root or (cause[-1] if cause else f"exit code {exit_code}")
        if exit_code is not None and exit_code in self.blocked_exit_codes:
            return StartClassification(True, quoted)
        return StartClassification(False, quoted)

    def is_error_line(self, line: str) -> bool:
        """Whether a log line is error-level (any of `error_lines` matches)."""
        return any(pattern.search(line) for pattern in self.error_lines)

    def exit_cause(self, lines: list[str]) -> list[str]:
        """The lines that say why the server exited.

        The final cascade of error-level lines: the last error line and the error lines before
        it with at most CAUSE_GAP other lines between neighbours (a "cleaning up" line inside
        a cascade), provided it ends within the last CAUSE_WINDOW lines (usage text may
        follow an argument error). Without such a cascade, the last FINAL_LINES lines.
        """
        errors = [i for i, line in enumerate(lines) if self.is_error_line(line)]
        if not errors or len(lines) - 1 - errors[-1] >= CAUSE_WINDOW:
            return lines[-FINAL_LINES:]
        first = len(errors) - 1
        while first > 0 and errors[first] - errors[first - 1] - 1 <= CAUSE_GAP:
            first -= 1
        return [lines[i] for i in errors[first:]]
