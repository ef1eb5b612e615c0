# mega: Mega and efficient-attention models in C.
#
#   make            build build/libmega.a and build/mega (installs missing Debian packages first)
#   make test       build and run every test; ends with "N passed, N failed"
#   make run        the main job: train a small byte-level Mega LM on the default corpus
#   make bench      benchmarks against the PyTorch peer (see docs/performance.md); AVX2=1: an
#                   AVX2-only machine simulated (build-avx2 without AVX-512, both sides on AVX2 kernels)
#   make bench-ttq  time to quality: held-out bits per byte after the same training time as the
#                   PyTorch peer (BENCH_TTQ_BUDGETS, default "300" s; docs/performance.md)
#   make bench-serve  mega serve under load on 127.0.0.1: 1, 4, 16 and 64 clients against --parallel 1,
#                   4 and 16, against mega generate's single-stream rate (docs/serving.md)
#   make asan       the test suite built with AddressSanitizer + UndefinedBehaviorSanitizer
#   make check-valgrind  train/eval/generate/classify/translate runs under valgrind --leak-check=full
#                   (build-vg, without -march=native: valgrind does not emulate AVX-512)
#   make install    install the headers, libmega.a, libmega.so, mega.pc (pkg-config) and the mega
#                   tool under PREFIX (default /usr/local; DESTDIR is honoured); make uninstall
#
# Options: CC=clang, NO_OMP=1 (no OpenMP), NO_BLAS=1 (portable GEMM), NATIVE=0 (no -march=native),
#          SAN=1 (sanitizers), BUILD=dir (output directory), DEBUG=1 (-O0 -g), NO_MPI=1 (no MPI:
#          mega train runs one rank; docs/distributed.md), NO_HTTP=1 (no mega serve; docs/serving.md),
#          NO_PNG=1 (no libpng: no PNG images), NO_SNDFILE=1 (no audio: docs/speech.md),
#          PREFIX=/usr/local, DESTDIR=, LIBDIR=$(PREFIX)/lib, INCLUDEDIR=$(PREFIX)/include.
#
# The outer targets install missing packages (scripts/deps.sh) and then re-invoke make with
# MEGA_INNER=1, so that feature detection runs after the packages exist.

BUILD ?= build
export BUILD

ifeq ($(MEGA_INNER),)
# ---------------------------------------------------------------------------------------------
# outer level
.PHONY: all test run bench bench-ttq bench-serve asan check-valgrind clean deps lib f64 tests shared install uninstall
all: deps
	@$(MAKE) --no-print-directory MEGA_INNER=1 all
test:
	@sh scripts/deps.sh test
	@$(MAKE) --no-print-directory MEGA_INNER=1 test
run:
	@sh scripts/deps.sh run
	@$(MAKE) --no-print-directory MEGA_INNER=1 run
bench:
	@sh scripts/deps.sh bench
	@$(MAKE) --no-print-directory MEGA_INNER=1 $(if $(filter 1,$(AVX2)),BUILD=build-avx2 NATIVE=0 EXTRA_CFLAGS=-march=haswell) bench
bench-ttq:
	@sh scripts/deps.sh bench-ttq
	@$(MAKE) --no-print-directory MEGA_INNER=1 bench-ttq
bench-serve: all
	@$(MAKE) --no-print-directory MEGA_INNER=1 bench-serve
asan: deps
	@$(MAKE) --no-print-directory MEGA_INNER=1 SAN=1 BUILD=build-san NATIVE=0 test
check-valgrind:
	@sh scripts/deps.sh valgrind
	@$(MAKE) --no-print-directory MEGA_INNER=1 BUILD=build-vg NATIVE=0 all
	@sh tests/valgrind.sh build-vg
lib tests f64 shared install: deps
	@$(MAKE) --no-print-directory MEGA_INNER=1 $@
uninstall:
	@$(MAKE) --no-print-directory MEGA_INNER=1 $@
deps:
	@sh scripts/deps.sh build
clean:
	rm -rf build build-san build-*
# ---- fuzzing (fuzz/README.md) -------------------------------------------------------------
# make fuzz [FUZZ_SECONDS=60] [FUZZ_TARGETS="safetensors cli ..."]: builds the libFuzzer targets
# fuzz/fuzz_<name>.c with clang against an ASan + UBSan + libFuzzer build of the library
# (build-fuzz: portable, no OpenMP, no libpng or libsndfile: the targets link the library alone), then runs each for FUZZ_SECONDS on a copy of
# fuzz/corpus/<name>; crashes go to build-fuzz/crashes/. make fuzz-build only builds them.
FUZZ_BUILD := build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SAN := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_NAMES := $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
.PHONY: fuzz fuzz-build fuzz-bins
fuzz: fuzz-build
	@sh fuzz/run.sh run $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)
fuzz-build: deps
	@sh fuzz/run.sh deps
	@$(MAKE) --no-print-directory MEGA_INNER=1 CC=clang BUILD=$(FUZZ_BUILD) NO_OMP=1 NO_BLAS=1 NATIVE=0 NO_PNG=1 NO_SNDFILE=1 \
	  EXTRA_CFLAGS="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" lib
	@$(MAKE) --no-print-directory fuzz-bins
fuzz-bins: $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)
$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.h $(FUZZ_BUILD)/libmega.a
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc \
	  $(FUZZ_SAN) -fsanitize=fuzzer $(filter %.c,$^) $(FUZZ_BUILD)/libmega.a -lcjson -lz -lm -o $@
# the CLI's flag parser is part of the tool, not of the library
$(FUZZ_BUILD)/fuzz_cli: tools/cli.c tools/cli.h
# the checkpoint generations' reader of mega train (tools/ckpt.c, with the tool's helpers)
$(FUZZ_BUILD)/fuzz_manifest: tools/ckpt.c tools/ckpt.h tools/common.c tools/common.h tools/cli.c tools/cli.h
# mega serve's request bodies (tools/serve_api.c)
$(FUZZ_BUILD)/fuzz_serve: tools/serve_api.c tools/serve.h
# ---- end of fuzzing ---------------------------------------------------------------------------
else
# ---------------------------------------------------------------------------------------------
# inner level: detection and rules
CC ?= cc
ifeq ($(CC),cc)
CC := gcc
endif
OPT := -O3
ifeq ($(DEBUG),1)
OPT := -O0 -g
endif
CFLAGS_BASE := -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Wshadow \
	-Wno-unused-parameter -fno-math-errno -Iinclude -Isrc $(OPT)
LDLIBS := -lm
# zlib: the FreeDict dictionaries (dictzip = gzip) of `mega freedict` (src/data/freedict.c)
LDLIBS += -lz

# try = compiles and links scripts/probe/$(2).c with flags $(1)
try = $(shell $(CC) scripts/probe/$(2).c -o /dev/null $(1) >/dev/null 2>&1 && echo yes)

ifneq ($(NATIVE),0)
ifeq ($(call try,-march=native,empty),yes)
CFLAGS_BASE += -march=native
MSG_NATIVE := ✓ -march=native
else
MSG_NATIVE := ✗ -march=native (not supported by $(CC))
endif
else
MSG_NATIVE := ✗ -march=native (NATIVE=0)
endif

ifeq ($(NO_OMP),1)
# the OpenMP pragmas are meant to be ignored in this build
CFLAGS_BASE += -Wno-unknown-pragmas
MSG_OMP := ✗ OpenMP (NO_OMP=1)
else ifeq ($(call try,-fopenmp,omp),yes)
CFLAGS_BASE += -fopenmp
LDLIBS += -fopenmp
MSG_OMP := ✓ OpenMP
else
MSG_OMP := ✗ OpenMP (not found; install libomp-dev for clang)
endif

# OpenBLAS: with OpenMP we link Debian's OpenMP build of OpenBLAS (libopenblas0-openmp), which
# shares our OpenMP thread pool and runs single-threaded inside our parallel regions; the default
# pthread build would spin its own threads against ours (oversubscription).
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
OPENBLAS_OMP_DIR := /usr/lib/$(MULTIARCH)/openblas-openmp
ifeq ($(NO_BLAS),1)
MSG_BLAS := ✗ OpenBLAS (NO_BLAS=1): portable GEMM
# (gcc only: clang uses libomp, and two OpenMP runtimes in one process fight the same way)
else ifeq ($(if $(findstring gcc,$(CC)),$(if $(findstring ✓,$(MSG_OMP)),$(call try,-L$(OPENBLAS_OMP_DIR) -lopenblas -fopenmp,cblas))),yes)
CFLAGS_BASE += -DMEGA_USE_BLAS
LDLIBS += -L$(OPENBLAS_OMP_DIR) -Wl,-rpath,$(OPENBLAS_OMP_DIR) -lopenblas
MSG_BLAS := ✓ OpenBLAS (OpenMP build)
else ifeq ($(call try,-lopenblas,cblas),yes)
CFLAGS_BASE += -DMEGA_USE_BLAS
LDLIBS += -lopenblas
MSG_BLAS := ✓ OpenBLAS (cblas, pthread build: install libopenblas-openmp-dev to avoid thread oversubscription)
else
MSG_BLAS := ✗ OpenBLAS (cblas.h/-lopenblas not found: apt-get install libopenblas-dev): portable GEMM
endif

ifeq ($(call try,-lcjson,cjson),yes)
LDLIBS += -lcjson
MSG_JSON := ✓ cJSON
else
$(error cJSON not found: apt-get install libcjson-dev (or run 'make' as root to install it))
endif

# libpng (docs/vision.md): PNG images, read by the "pathfinder" data format and written by
# `mega pathfinder`; without it (or with NO_PNG=1) both say in one line that the build has no
# PNG support, and everything else works.
ifeq ($(NO_PNG),1)
MSG_PNG := ✗ libpng (NO_PNG=1): no PNG images
else ifeq ($(call try,-lpng,png),yes)
CFLAGS_BASE += -DMEGA_USE_PNG
LDLIBS += -lpng
MSG_PNG := ✓ libpng
else
MSG_PNG := ✗ libpng (not found: apt-get install libpng-dev): no PNG images
endif

# libsndfile: audio clips (src/data/audio.c: the Speech Commands data, `mega speech-synth`); without
# it (or with NO_SNDFILE=1) the audio functions fail with one line saying so
ifeq ($(NO_SNDFILE),1)
MSG_SNDFILE := ✗ libsndfile (NO_SNDFILE=1): no audio
else ifeq ($(call try,-lsndfile,sndfile),yes)
CFLAGS_BASE += -DMEGA_USE_SNDFILE
LDLIBS += -lsndfile
MSG_SNDFILE := ✓ libsndfile
else
MSG_SNDFILE := ✗ libsndfile (not found: apt-get install libsndfile1-dev): no audio
endif

ifeq ($(SAN),1)
CFLAGS_BASE += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDLIBS += -fsanitize=address,undefined
endif

# MPI (docs/distributed.md): tools/dist.c is compiled with MPI's flags and the tool linked with
# its libraries; without MPI (or with NO_MPI=1) dist.c is the single-rank stub. The flags come from
# pkg-config (mpi-c: Debian's name for the default implementation, then ompi-c, mpich), else from
# the mpicc wrapper (Open MPI's --showme, MPICH's -compile_info/-link_info), and must compile and
# link the probe with $(CC). Sanitizer builds use the stub: MPI runtimes keep memory to the end
# that LeakSanitizer would report in every rank.
ifeq ($(NO_MPI),1)
MSG_MPI := ✗ MPI (NO_MPI=1): single rank
else ifeq ($(SAN),1)
MSG_MPI := ✗ MPI (SAN=1 uses the single-rank stub)
else
MPI_PC := $(firstword $(foreach p,mpi-c ompi-c mpich,$(shell pkg-config --exists $(p) 2>/dev/null && echo $(p))))
ifneq ($(MPI_PC),)
MPI_CFLAGS := $(shell pkg-config --cflags $(MPI_PC))
MPI_LIBS := $(shell pkg-config --libs $(MPI_PC))
else ifneq ($(shell command -v mpicc 2>/dev/null),)
MPI_CFLAGS := $(or $(shell mpicc --showme:compile 2>/dev/null),$(shell mpicc -compile_info 2>/dev/null | cut -d' ' -f2- | tr ' ' '\n' | grep -E '^-[ID]' | tr '\n' ' '))
MPI_LIBS := $(or $(shell mpicc --showme:link 2>/dev/null),$(shell mpicc -link_info 2>/dev/null | cut -d' ' -f2- | tr ' ' '\n' | grep -E '^-[lLW]' | tr '\n' ' '))
endif
ifeq ($(if $(MPI_LIBS),$(call try,$(MPI_CFLAGS) $(MPI_LIBS),mpi)),yes)
MSG_MPI := ✓ MPI$(if $(MPI_PC), ($(MPI_PC)),  (mpicc))
else
MPI_CFLAGS :=
MPI_LIBS :=
MSG_MPI := ✗ MPI (not found: apt-get install libopenmpi-dev openmpi-bin): single rank
endif
endif

# civetweb (docs/serving.md): the HTTP library of `mega serve`. tools/serve.c is compiled with
# -DMEGA_USE_CIVETWEB and the tool linked with -lcivetweb when the probe compiles and links (Debian
# ships no pkg-config file for it); without it (or with NO_HTTP=1) `mega serve` says in one line
# that the build has no HTTP server.
ifeq ($(NO_HTTP),1)
MSG_HTTP := ✗ civetweb (NO_HTTP=1): no mega serve
else ifeq ($(call try,-lcivetweb,civetweb),yes)
HTTP_LIBS := -lcivetweb -pthread
MSG_HTTP := ✓ civetweb
else
MSG_HTTP := ✗ civetweb (not found: apt-get install libcivetweb-dev): no mega serve
endif

CFLAGS := $(CFLAGS_BASE) $(EXTRA_CFLAGS)

LIB_SRC := $(wildcard src/core/*.c src/ops/*.c src/layers/*.c src/model/*.c src/data/*.c src/train/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB64_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj64/%.o)
TOOL_SRC := $(wildcard tools/*.c)
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
LIB_HDRS := $(wildcard include/*.h src/*/*.h)
HDRS := $(LIB_HDRS) $(wildcard tests/*.h tests/lib/*.h)

# test programs: tests/test_*.c build against the float library; tests/t64_*.c against the
# double-precision build (finite differences and float64 fixtures). The tests named in T64_FROM
# are built twice from the same source: $(BUILD)/test_X (float) and $(BUILD)/t64_X (double)
# from tests/test_X.c.
T64_FROM := fixtures lm s2s stream mixer_attn_stream mixer_aft_stream mixer_abc_stream megalodon megalodon_model
TEST32_SRC := $(wildcard tests/test_*.c)
TEST64_SRC := $(wildcard tests/t64_*.c)
TEST_BINS := $(TEST32_SRC:tests/%.c=$(BUILD)/%) $(TEST64_SRC:tests/%.c=$(BUILD)/%) $(T64_FROM:%=$(BUILD)/t64_%)

.PHONY: all lib tests test run bench bench-ttq bench-serve f64 banner shared install uninstall install-test
all: banner $(BUILD)/libmega.a $(BUILD)/libmega.so $(BUILD)/mega
lib: $(BUILD)/libmega.a
f64: $(BUILD)/libmega64.a
tests: all $(BUILD)/libmega64.a $(TEST_BINS)

# bench-serve: a byte-level Mega model (4 layers, embedding 128; 20 training steps: the speed does
# not depend on the weights) in $(BUILD)/bench-serve, then scripts/bench_serve.py (bounded in
# requests and time; 127.0.0.1 only)
bench-serve: $(BUILD)/mega
	@mkdir -p $(BUILD)/bench-serve
	@awk 'BEGIN { for (i = 0; i < 4000; i++) printf "the cat %d sees the bird %d. ", i % 7, i % 11 }' > $(BUILD)/bench-serve/text.txt
	@$(BUILD)/mega train --data $(BUILD)/bench-serve/text.txt --out $(BUILD)/bench-serve/run --layers 4 --embed-dim 128 \
	  --z-dim 64 --hidden-dim 256 --ffn-dim 256 --chunk-size 64 --batch 4 --seq-len 64 --steps 20 --force --quiet > /dev/null
	python3 scripts/bench_serve.py --mega $(BUILD)/mega --model $(BUILD)/bench-serve/run --parallel 1,4,16 \
	  --clients 1,4,16,64 --requests 4 --max-tokens 256 $(if $(BENCH_SERVE_THREADS),--threads $(BENCH_SERVE_THREADS))

banner:
	@echo "mega build ($(CC), $(BUILD)): $(MSG_NATIVE)  $(MSG_OMP)  $(MSG_BLAS)  $(MSG_JSON)  $(MSG_MPI)  $(MSG_HTTP)  $(MSG_PNG)  $(MSG_SNDFILE)"

$(BUILD)/obj/%.o: %.c $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/obj64/%.o: %.c $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMEGA_F64 -c $< -o $@

$(BUILD)/libmega.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libmega64.a: $(LIB64_OBJ)
	@rm -f $@
	ar rcs $@ $^

# the commit for `mega version`, regenerated only when it changes (so nothing else rebuilds)
COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -modified)
$(BUILD)/gen/commit.h: FORCE
	@mkdir -p $(dir $@)
	@echo '#define MEGA_COMMIT "$(COMMIT)"' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/obj/tools/mega.o: $(BUILD)/gen/commit.h
$(BUILD)/obj/tools/mega.o: CFLAGS += -I$(BUILD)/gen
.PHONY: FORCE
FORCE:

# the CLI's objects also depend on its own headers
$(TOOL_OBJ): $(wildcard tools/*.h)
# only the MPI layer sees mpi.h; the flags are part of its object's dependencies (a build that
# gains or loses MPI recompiles it)
$(BUILD)/obj/tools/dist.o: CFLAGS += $(if $(MPI_LIBS),-DMEGA_USE_MPI $(MPI_CFLAGS))
$(BUILD)/obj/tools/dist.o: $(BUILD)/gen/mpi.flags
$(BUILD)/gen/mpi.flags: FORCE
	@mkdir -p $(dir $@)
	@echo '$(MPI_CFLAGS) $(MPI_LIBS)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
# only the server sees civetweb.h (a build that gains or loses it recompiles the server)
$(BUILD)/obj/tools/serve.o: CFLAGS += $(if $(HTTP_LIBS),-DMEGA_USE_CIVETWEB)
$(BUILD)/obj/tools/serve.o: $(BUILD)/gen/http.flags
$(BUILD)/gen/http.flags: FORCE
	@mkdir -p $(dir $@)
	@echo '$(HTTP_LIBS)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/mega: $(TOOL_OBJ) $(BUILD)/libmega.a
	$(CC) $(CFLAGS) $(TOOL_OBJ) $(BUILD)/libmega.a $(LDLIBS) $(MPI_LIBS) $(HTTP_LIBS) -o $@

TEST_COMMON := $(wildcard tests/lib/*.c)
$(BUILD)/test_%: tests/test_%.c $(TEST_COMMON) $(BUILD)/libmega.a $(HDRS) $(wildcard tests/*.c)
	$(CC) $(CFLAGS) -Itests/lib $< $(TEST_COMMON) $(BUILD)/libmega.a $(LDLIBS) -o $@
# test_cls_data also runs `mega listops` (the program next to it)
$(BUILD)/test_cls_data: $(BUILD)/mega
$(BUILD)/test_threads: LDLIBS += -pthread
# two threads play two processes
$(BUILD)/test_batch_sync: LDLIBS += -pthread
$(BUILD)/t64_%: tests/t64_%.c $(TEST_COMMON) $(BUILD)/libmega64.a $(HDRS) $(wildcard tests/*.c)
	$(CC) $(CFLAGS) -DMEGA_F64 -Itests/lib $< $(TEST_COMMON) $(BUILD)/libmega64.a $(LDLIBS) -o $@
$(T64_FROM:%=$(BUILD)/t64_%): $(BUILD)/t64_%: tests/test_%.c $(TEST_COMMON) $(BUILD)/libmega64.a $(HDRS) $(wildcard tests/*.c)
	$(CC) $(CFLAGS) -DMEGA_F64 -Itests/lib $< $(TEST_COMMON) $(BUILD)/libmega64.a $(LDLIBS) -o $@

test: banner tests install-test
	@sh tests/run.sh $(BUILD)

run: all
	@sh scripts/run.sh $(BUILD)

bench: all
	@sh bench/run.sh $(BUILD) $(if $(filter 1,$(COTENANT)),--cotenant) $(if $(filter 1,$(AVX2)),--avx2)

bench-ttq: all
	@sh bench/ttq.sh $(BUILD)

# ---- the shared library and the installation ------------------------------------------------
# libmega.so is built from position-independent objects of its own ($(BUILD)/objpic; the static
# library keeps the non-PIC ones). mega.pc is written from the detection above: Libs is what a
# program linking libmega.so needs (the library carries its own dependencies and the rpath of
# Debian's OpenMP OpenBLAS), Libs.private what linking libmega.a adds (pkg-config --static);
# MEGA_USE_BLAS stays internal (mega.h does not depend on it).
VERSION := $(shell sed -n 's/^\#define MEGA_VERSION "\(.*\)"/\1/p' include/mega.h)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))
SONAME := libmega.so.$(SOMAJOR)
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
LDCONFIG ?= ldconfig

# hidden visibility: libmega.so exports only what the public headers mark MEGA_API
PIC_FLAGS := -fPIC -fvisibility=hidden
ifeq ($(call try,-fPIC -fno-semantic-interposition,empty),yes)
PIC_FLAGS += -fno-semantic-interposition
endif
# every undefined symbol resolved at link time (not with sanitizers: clang leaves their runtime
# to the executable)
SO_DEFS := $(if $(filter 1,$(SAN)),,-Wl,-z,defs)
LIBPIC_OBJ := $(LIB_SRC:%.c=$(BUILD)/objpic/%.o)
# link flags of the build: sanitizers (needed by every program linking this library), the rest
PC_SAN := $(filter -fsanitize=%,$(LDLIBS))
PC_PRIVATE := $(filter-out -fsanitize=% -lm,$(LDLIBS)) -lm

shared: $(BUILD)/libmega.so

$(BUILD)/objpic/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PIC_FLAGS) -c $< -o $@

$(BUILD)/libmega.so.$(VERSION): $(LIBPIC_OBJ)
	$(CC) $(CFLAGS) -shared -Wl,-soname,$(SONAME) $(SO_DEFS) $(LIBPIC_OBJ) $(LDLIBS) -o $@
$(BUILD)/libmega.so: $(BUILD)/libmega.so.$(VERSION)
	ln -sf libmega.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

# $(call install_to,DESTDIR,PREFIX,LIBDIR,INCLUDEDIR,BINDIR,PKGCONFIGDIR): copy the build and
# write mega.pc for that prefix
define install_to
install -d $(1)$(4) $(1)$(3) $(1)$(5) $(1)$(6) && \
	install -m 644 include/*.h $(1)$(4)/ && \
	install -m 644 $(BUILD)/libmega.a $(1)$(3)/libmega.a && \
	install -m 755 $(BUILD)/libmega.so.$(VERSION) $(1)$(3)/libmega.so.$(VERSION) && \
	ln -sf libmega.so.$(VERSION) $(1)$(3)/$(SONAME) && \
	ln -sf $(SONAME) $(1)$(3)/libmega.so && \
	install -m 755 $(BUILD)/mega $(1)$(5)/mega && \
	printf '%s\n' 'prefix=$(2)' 'libdir=$(patsubst $(2)/%,$${prefix}/%,$(3))' \
	  'includedir=$(patsubst $(2)/%,$${prefix}/%,$(4))' '' 'Name: mega' \
	  'Description: Mega (moving-average equipped gated attention) and efficient-attention models' \
	  'Version: $(VERSION)' 'Cflags: -I$${includedir}' 'Libs: $(strip -L$${libdir} -lmega $(PC_SAN))' \
	  'Libs.private: $(PC_PRIVATE)' > $(1)$(6)/mega.pc
endef

install: all
	$(call install_to,$(DESTDIR),$(PREFIX),$(LIBDIR),$(INCLUDEDIR),$(BINDIR),$(PKGCONFIGDIR))
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v $(LDCONFIG) > /dev/null 2>&1; then $(LDCONFIG); fi

uninstall:
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/,$(notdir $(wildcard include/*.h))) \
	  $(addprefix $(DESTDIR)$(LIBDIR)/,libmega.a libmega.so $(SONAME) libmega.so.$(VERSION)) \
	  $(DESTDIR)$(PKGCONFIGDIR)/mega.pc $(DESTDIR)$(BINDIR)/mega

# the copy tests/sh/test_install.sh links the example against (through pkg-config only), with
# the compiler of this build (a clang-built library needs clang's OpenMP runtime)
INSTALL_TEST := $(abspath $(BUILD))/install-test
install-test: all
	@rm -rf $(INSTALL_TEST)
	@$(call install_to,,$(INSTALL_TEST),$(INSTALL_TEST)/lib,$(INSTALL_TEST)/include,$(INSTALL_TEST)/bin,$(INSTALL_TEST)/lib/pkgconfig)
	@printf 'CC=%s\n' '$(CC)' > $(INSTALL_TEST)/build.env
endif
