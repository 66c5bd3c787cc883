# Unit tests of trainer (Check).
