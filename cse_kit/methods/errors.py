"""The error a method's name, registration or options is refused with, in one line (its own module, so that both
the registry and the Objective base class raise it without importing each other)."""


class MethodError(ValueError):
    pass
