# Unit tests of pserver (Check).
