# Integration tests: pserver.
