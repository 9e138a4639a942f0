# Thin wrapper over CMake: `make`, `make test`, `make demo`, `make bench`.
# On a fresh Debian bookworm machine these install what they need (as root), so the two
# commands in the README are the whole set-up.

BUILD     ?= build
SAN_BUILD ?= build-sanitize
JOBS      ?= $(shell nproc)
CMAKE_FLAGS ?=

# Everything the build and the tests need, from Debian's packages.
DEBIAN_PACKAGES := build-essential cmake pkg-config libcmocka-dev python3 valgrind clang-format \
	procps libevent-dev libcurl4-openssl-dev libjansson-dev libfyaml-dev libnghttp2-dev \
	libprotobuf-c-dev protobuf-c-compiler python3-grpcio python3-protobuf openssl libssl-dev \
	chromium prometheus python3-websocket python3-kubernetes kubernetes-client tmux podman runc

# What `make images` and `make images-test` need besides (docs/images.md); not needed by
# `make test`.
IMAGE_PACKAGES := mmdebstrap podman runc skopeo umoci
IMAGES_DIR ?= $(BUILD)/images
VERSION := $(shell grep -m1 -o 'vgpu VERSION [0-9.]*' CMakeLists.txt | cut -d' ' -f3)

# `make` alone builds everything into build/ (tests/lint/make_default.sh checks it).
.DEFAULT_GOAL := all

print-packages:
	@echo $(DEBIAN_PACKAGES)

.PHONY: all deps images-deps print-packages test sanitize demo bench e2e fuzz format \
	check-format clean images images-test

# install-packages LIST: installs what of LIST is missing (as root), else prints the line.
# kubernetes-client (for `kubectl kustomize`) counts as present when another package
# already put kubectl on PATH.
define install-packages
	@missing=$$(for p in $(1); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || \
		{ [ $$p = kubernetes-client ] && command -v kubectl >/dev/null; } || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing: $$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y --no-install-recommends $$missing; \
		else \
			echo "missing packages; run as root:"; \
			echo "  apt-get install -y --no-install-recommends $$missing"; \
			exit 1; \
		fi; \
	fi
endef

all: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

deps:
	$(call install-packages,$(DEBIAN_PACKAGES))

images-deps:
	$(call install-packages,$(IMAGE_PACKAGES))

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

test: all
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600

# ASan+UBSan for everything, UBSan alone for what is loaded with LD_PRELOAD.
sanitize: deps
	cmake -S . -B $(SAN_BUILD) -DVGPU_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(SAN_BUILD) -j$(JOBS)
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j$(JOBS) --timeout 900 -LE nosan

# OCI archives of vgpu-scheduler, vgpu-device-plugin, vgpu-monitor and vgpu-tools, built
# from Debian packages alone (root: mmdebstrap extracts packages with their owners).
images: all images-deps
	./images/build.sh $(BUILD) $(IMAGES_DIR) $(VERSION)

# Runs the images with podman (or checks their file trees where podman cannot run).
images-test: images
	/usr/bin/python3 images/test.py $(BUILD) $(CURDIR) $(IMAGES_DIR) $(VERSION)

demo: all
	./demo/run.sh $(BUILD)

bench: all
	./bench/run.sh $(BUILD)

# The cluster in a box: the rendered vgpu overlay on two simulated nodes (docs/install.md),
# then a Volcano node (docs/volcano.md); also part of `make test` (CTest label e2e).
e2e: all
	/usr/bin/python3 tests/e2e/e2e.py $(BUILD) $(CURDIR)
	/usr/bin/python3 tests/e2e/volcano.py $(BUILD) $(CURDIR)

# libFuzzer builds of every fuzz target (clang); their corpora also run under `make test`.
fuzz:
	./tests/fuzz/build.sh

format:
	find src tests bench -name '*.[ch]' | xargs clang-format -i

check-format:
	find src tests bench -name '*.[ch]' | xargs clang-format --dry-run --Werror

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
