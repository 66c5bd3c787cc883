# Integration tests: deploy.
