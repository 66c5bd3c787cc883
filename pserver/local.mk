# pserver/: flotilla-pserver.
