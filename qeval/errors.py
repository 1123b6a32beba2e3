"""The errors a user sees: one line, no traceback, a distinct exit code each."""

from __future__ import annotations

# Exit codes, shared by the CLI and CI: 0 pass, 1 a gate failed, 2 usage/config, 3 infrastructure.
EXIT_PASS = 0
EXIT_GATE_FAILED = 1
EXIT_USAGE = 2
EXIT_INFRA = 3


class QevalError(Exception):
    """Base of every error qeval reports to a user."""

    exit_code = EXIT_INFRA


class ConfigError(QevalError):
    """Bad input: a config, suite or policy file. Names the file and the place."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, file: str | None = None, where: str | None = None):
        self.file, self.where = file, where
        prefix = ":".join(p for p in (file, where) if p)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class EngineError(QevalError):
    """An engine failed to start, died, or stopped answering."""

    def __init__(self, message: str, *, variant: str | None = None, log_tail: str = "", at_start: bool = False,
                 engine_alive: bool = False):
        self.variant, self.log_tail = variant, log_tail
        # where it surfaced decides whether a restart can help: not when the engine never came up (a start-up
        # failure repeats), nor when it still answered (the fault is elsewhere, an lm-eval crash, say)
        self.at_start: bool = at_start
        self.engine_alive: bool = engine_alive
        head = f"variant {variant!r}: {message}" if variant else message
        super().__init__(head + (f"\n--- engine log (tail) ---\n{log_tail}" if log_tail else ""))


class QuantizeError(QevalError):
    """A quantizer failed; the log tail says why."""


class MissingEnvError(QevalError):
    """A runtime environment (engine / quantizer venv, model, data) was not built."""

    def __init__(self, what: str, path: str, hint: str = "qeval setup"):
        super().__init__(f"{what} not found at {path}; build it with `{hint}`")
