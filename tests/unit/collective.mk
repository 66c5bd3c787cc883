# Unit tests of collective (Check).
