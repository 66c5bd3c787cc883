# Job file (config.c) and what it means for a run (strategy.c), the
# FLOTILLA_* cluster environment (cluster.c), the checkpoint format (ckpt.c).
flotillainclude_HEADERS += common/fl_config.h common/fl_cluster.h common/fl_ckpt.h
libflotilla_la_SOURCES += common/config.c common/config_int.h common/strategy.c \
	common/cluster.c common/cluster_engine.c common/ckpt.c \
	common/fl_model_kind.h common/model_kind.c
