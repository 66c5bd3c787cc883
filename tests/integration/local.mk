# Integration tests: real daemons on 127.0.0.x, bounded in time.
