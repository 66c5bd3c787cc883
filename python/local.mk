# python/: the flotilla Python package (pure Python, for Debian's python3),
# installed into $(flpythondir)/flotilla (configure --with-pythondir).  Its
# _paths.py records the installed bindir, substituted here at build time as
# autotools substitutes installation directories (fully expanded).
flotillapydir = $(flpythondir)/flotilla
dist_flotillapy_DATA = python/flotilla/__init__.py python/flotilla/_bin.py \
	python/flotilla/_errors.py python/flotilla/_export.py python/flotilla/_job.py \
	python/flotilla/_load.py python/flotilla/_progress.py python/flotilla/_yaml.py
nodist_flotillapy_DATA = python/flotilla/_paths.py
EXTRA_DIST += python/flotilla/_paths.py.in
CLEANFILES += python/flotilla/_paths.py

python/flotilla/_paths.py: $(srcdir)/python/flotilla/_paths.py.in Makefile
	$(AM_V_GEN)$(MKDIR_P) python/flotilla && \
	sed -e 's|@bindir[@]|$(bindir)|g' $(srcdir)/python/flotilla/_paths.py.in > $@.tmp && \
	mv $@.tmp $@
