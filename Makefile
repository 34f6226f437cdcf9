# Thin wrapper over CMake.  The commands a new user runs:
#   make demo     - set up (scripts/deps.sh demo: compiler, CMake and the
#                   libraries only), build, and show encryption end to end
#   make test     - set up (scripts/deps.sh test: everything), build, and
#                   run every test (also under ASan/UBSan)
#   make install  - build, then install under PREFIX (default /usr/local;
#                   DESTDIR honoured): CLI, tde.so, libsqlite-tde.so and .a,
#                   header, sqlite-tde.pc
#   make deb      - build, then a Debian package in $(BUILD)/deb/
BUILD      ?= build
BUILD_SAN  ?= build-asan
JOBS       ?= 2
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTDE_WERROR=ON
NPM_DIR    = $(abspath $(BUILD))/npm

.PHONY: all deps deps-demo deps-bench deps-package build configure-lib build-lib build-asan test test-fast test-asan demo bench \
        stress clean \
        install install-files deb deb-files
PREFIX     ?= /usr/local
DESTDIR    ?=

all: build

deps:
	@scripts/deps.sh test $(BUILD)
deps-demo:
	@scripts/deps.sh demo $(BUILD)
deps-bench:
	@scripts/deps.sh bench $(BUILD)
deps-package:
	@scripts/deps.sh package $(BUILD)

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DTDE_TESTS=ON -DTDE_NPM_DIR=$(NPM_DIR) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# make demo, install, deb and bench need no test tools: a new build folder
# is configured without the test suite (-DTDE_TESTS=OFF: no cmocka, no
# npm), and one that make test configured keeps it.  build-lib builds only
# the library, tde.so, the CLI and the benchmark driver.
LIB_TARGETS = sqlite-tde tde tde_static tde_shared sqlite-tde-bench
configure-lib:
	@if [ -f $(BUILD)/CMakeCache.txt ]; then tests=; else tests=-DTDE_TESTS=OFF; fi; \
	  cmake -S . -B $(BUILD) $(CMAKE_FLAGS) $$tests -DTDE_NPM_DIR=$(NPM_DIR) >/dev/null
build-lib: configure-lib
	@cmake --build $(BUILD) -j$(JOBS) --target $(LIB_TARGETS)

build-asan: deps
	@cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DTDE_SANITIZE=ON -DTDE_WERROR=ON -DTDE_NPM_DIR=$(NPM_DIR) >/dev/null
	@cmake --build $(BUILD_SAN) -j$(JOBS)

# Full suite: normal build, then the same suite under AddressSanitizer and
# UndefinedBehaviorSanitizer.
test: test-fast test-asan

# Each ctest run starts from an empty $(BUILD)/testtmp and keeps every
# test's scratch files (TDE_KEEP_SCRATCH=1); then scripts/scan-secrets.sh
# greps them and ctest's log (Testing/Temporary/LastTest.log) for every
# test password and PIN.  It runs even when a test failed and fails the
# target if one leaked; testtmp is removed only when all passed.
test-fast: build
	@rm -rf $(BUILD)/testtmp; mkdir -p $(BUILD)/testtmp; rc=0; \
	  (cd $(BUILD) && TDE_KEEP_SCRATCH=1 ctest --output-on-failure -LE stress -j$(JOBS)) || { rc=1; scripts/ci-failures.sh $(BUILD); }; \
	  scripts/scan-secrets.sh $(BUILD)/testtmp $(BUILD)/Testing || rc=1; \
	  if [ $$rc -eq 0 ]; then rm -rf $(BUILD)/testtmp; fi; exit $$rc

test-asan: build-asan
	@rm -rf $(BUILD_SAN)/testtmp; mkdir -p $(BUILD_SAN)/testtmp; rc=0; \
	  (cd $(BUILD_SAN) && TDE_KEEP_SCRATCH=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -LE stress -j$(JOBS)) || { rc=1; scripts/ci-failures.sh $(BUILD_SAN); }; \
	  scripts/scan-secrets.sh $(BUILD_SAN)/testtmp $(BUILD_SAN)/Testing || rc=1; \
	  if [ $$rc -eq 0 ]; then rm -rf $(BUILD_SAN)/testtmp; fi; exit $$rc

demo: deps-demo
	@$(MAKE) --no-print-directory build-lib
	@scripts/demo.sh $(BUILD)

# Benchmark kit, full default run (about 50 minutes on 2 cores): reports in
# $(BENCH_OUT)/.  More options: BENCH_ARGS="--seconds 10", or
# $(BUILD)/sqlite-tde bench --help.
BENCH_OUT  ?= bench-out
BENCH_ARGS ?=
bench: deps-bench
	@$(MAKE) --no-print-directory configure-lib
	@cmake --build $(BUILD) -j$(JOBS)
	@$(BUILD)/sqlite-tde bench --out $(BENCH_OUT) $(BENCH_ARGS)

clean:
	rm -rf $(BUILD) $(BUILD_SAN)

# install-files and deb-files do the same without building first (the
# tests call them on a build folder they did not make).  ldconfig runs
# only for a real install as root, so the new shared library is found.
install: deps-demo
	@$(MAKE) --no-print-directory build-lib
	@$(MAKE) --no-print-directory install-files
install-files:
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix $(PREFIX)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

# The package is made by dpkg-buildpackage (debhelper) from the files
# $(BUILD) already holds; it lands in $(BUILD)/deb/.
deb: deps-package
	@$(MAKE) --no-print-directory build-lib
	@$(MAKE) --no-print-directory deb-files
deb-files:
	@debian/make-deb.sh $(abspath $(BUILD))

# Long reliability runs (issue 7): the crash-consistency and concurrency
# tests with TDE_STRESS=1 -- 5,000 kill -9 cycles per mode at page sizes
# 1024, 4096 and 8192, 120 s per concurrency mode with 4 processes x 4
# threads (about an hour and a half on 2 cores).  Known-bug modes, which
# `make test` reports as XFAIL, fail here (TDE_CRASH_STRICT=1).  Then the
# ctest tests labelled `stress` (format 3's twins of the longest suites on
# SQLite 3.53), which `make test` leaves out.
stress: build
	@mkdir -p $(BUILD)/testtmp
	@rc=0; for t in tests/integration/test_crash.sh tests/integration/test_concurrency.sh; do \
	  TDE_STRESS=1 TDE_CRASH_STRICT=1 TDE_BUILD=$(abspath $(BUILD)) TDE_SRC=$(CURDIR) \
	  TDE_TEST_TMP=$(abspath $(BUILD))/testtmp bash $$t || rc=1; done; \
	  (cd $(BUILD) && ctest --output-on-failure -L stress -j$(JOBS)) || rc=1; exit $$rc
