# Integration tests: trainer.
