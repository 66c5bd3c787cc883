# Integration tests: collective.
