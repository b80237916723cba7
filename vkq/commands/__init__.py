"""The `vkq` command line and what its commands need (the top layer of
docs/architecture.md): cli parses and dispatches; each command has its
module (bench, compare, generate, info, report, tune, ...)."""
